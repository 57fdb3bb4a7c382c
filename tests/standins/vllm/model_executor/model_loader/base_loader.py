"""Stand-in for vllm 0.24.0 model_executor/model_loader/base_loader.py: BaseModelLoader.load_model
(self, vllm_config, model_config, prefix="") returns the loaded nn.Module (here a tiny two-layer MLP
whose down projection is row-parallel: K sharded over the stand-in TP size)."""

import torch


class _Block(torch.nn.Module):
    def __init__(self, hidden: int, per_rank: int) -> None:
        super().__init__()
        self.shared_experts = torch.nn.Module()
        self.shared_experts.down_proj = torch.nn.Linear(per_rank, hidden, bias=False)


class BaseModelLoader:
    def load_model(self, vllm_config, model_config, prefix: str = ""):
        hidden, intermediate, tp = model_config
        model = torch.nn.Module()
        model.layers = torch.nn.ModuleList([_Block(hidden, intermediate // tp) for _ in range(2)])
        return model
