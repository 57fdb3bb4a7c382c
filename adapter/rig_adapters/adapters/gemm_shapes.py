"""gemm_shapes (test-only instrument): record the shape of every parameter the engine allocated on
this rank, once the model is loaded, into the adapter manifest.

`rig audit RECIPE --boot BOOT` holds the audit's per-rank GEMMs (derived from the model's widths and
the topology) against these shapes: what the engine really runs, read from the engine, not assumed.
It changes nothing the engine computes. RIG_GEMM_SHAPES is the gate.
"""

from __future__ import annotations

import functools
from typing import Any

from rig_adapters.runtime import AdapterContext


def _tp_rank() -> tuple[int | None, int | None]:
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size

        return get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()
    except Exception:  # noqa: BLE001 - an instrument never takes the engine down; the rank is then unknown
        return None, None


def install_load_model(ctx: AdapterContext) -> None:
    original = ctx.current

    @functools.wraps(original)
    def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        model = original(self, *args, **kwargs)
        rank, size = _tp_rank()
        shapes = {name: [int(d) for d in parameter.shape] for name, parameter in model.named_parameters()}
        dtypes = sorted({str(parameter.dtype).removeprefix("torch.") for _, parameter in model.named_parameters()})
        ctx.record_shapes({"tp_rank": rank, "tp_size": size, "dtypes": dtypes, "parameters": shapes})
        ctx.first_use(f"recorded {len(shapes)} parameter shapes on TP rank {rank} of {size}")
        return model

    ctx.replace(load_model, "parameter shapes recorded after the model loads")
