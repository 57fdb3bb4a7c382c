"""shared_pad_k and mxfp8_b12x against SGLang 0.5.23's own classes: the wheel's
layers/linear.py and models/deepseek_v2.py build a small DeepSeek-V3 model on the CPU
(tests/oracles/sglang_classes.py; attention and kernels stubbed), and the adapters run on it as
they would in the engine. Stock RowParallelLinear keeps no `prefix`, so the shared expert's
down_proj is found only through the name the adapter records when LinearBase is built."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

from rig.drift import fetch_wheel

PINNED = "0.5.23"  # mia-tp4's engine.check_release
REAL_MODULES = (
    "sglang.srt.layers.linear",
    "sglang.srt.layers.parameter",
    "sglang.srt.layers.quantization.base_config",
    "sglang.srt.layers.quantization.unquant",
    "sglang.srt.layers.quantization.fp8_utils",
    "sglang.srt.models.deepseek_v2",
    "sglang.srt.utils.common",  # unpacked for add_prefix's source only
)

SCRIPT = r"""
import inspect, json, sys, types
from pathlib import Path
sys.path[:0] = [TESTS, ADAPTER]
from oracles.sglang_classes import GIVEN, Stub, WheelClasses, function_from_source
root = Path(ROOT)
WheelClasses(root, [m for m in REAL if not m.endswith("utils.common")]).install()
import torch


class Parallel(types.SimpleNamespace):
    def __getattr__(self, name):
        return Stub(f"parallel.{name}")


one_rank = Parallel(tp_size=1, tp_rank=0, moe_ep_size=1, moe_ep_rank=0, pp_size=1, pp_rank=0, attn_tp_size=1, attn_tp_rank=0)
add_prefix = function_from_source(root / "sglang/srt/utils/common.py", "add_prefix")


def make_pp_layers(num_hidden_layers, layer_fn, prefix="", **_):  # utils.common.make_pp_layers, one pipeline stage
    return torch.nn.ModuleList([layer_fn(idx=i, prefix=add_prefix(i, prefix)) for i in range(num_hidden_layers)]), 0, num_hidden_layers


GIVEN.update(get_group_rank_size=lambda group=None: (0, 1), get_parallel=lambda: one_rank, divide=lambda a, b: a // b,
             get_tensor_model_parallel_world_size=lambda: 1, get_tensor_model_parallel_rank=lambda: 0,
             get_num_fused_shared_experts=lambda: 0, has_per_rank_fused_shared_slots=lambda n: False,
             add_prefix=add_prefix, make_pp_layers=make_pp_layers,
             append_stages=lambda *a, **k: (Stub("attn_boundary"), Stub("ffn_boundary")))

import sglang.srt.layers.linear as linear
import sglang.srt.layers.quantization.fp8_utils as fp8_utils
from rig_adapters.adapters import mxfp8_b12x, shared_pad_k
from rig_adapters.registry import BY_NAME
from rig_adapters.runtime import AdapterContext


def context(adapter, installer, module):
    spec = BY_NAME[adapter]
    (target,) = [t for t in spec.targets if t.installer == installer]
    return AdapterContext(spec, target, module), target


out = {}
ctx, target = context("shared_pad_k", "install_names", linear)
out["missing_params"] = [p for p in target.params if p not in inspect.signature(linear.LinearBase.__init__).parameters]
shared_pad_k.install_names(ctx)

import sglang.srt.models.deepseek_v2 as deepseek


class NoAttention(torch.nn.Module):  # MLA needs its kernels; the MLPs' linears are what this is about
    def __init__(self, *args, **kwargs):
        super().__init__()

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return Stub(f"attention.{name}")


deepseek.DeepseekV2AttentionMLA = NoAttention
from transformers import DeepseekV3Config

config = DeepseekV3Config(vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=64, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
                          num_experts_per_tok=2, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=None,
                          qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_group=1, topk_group=1)
config.moe_layer_freq, config.topk_method, config.scoring_func = 1, "noaux_tc", "sigmoid"  # DeepSeek-V3's config.json
model = deepseek.DeepseekV2ForCausalLM(config, quant_config=None)


class Fp8LinearMethod:  # records what SGLang's own preparation would be handed
    def _prepare_block_fp8_as_mxfp8(self, layer):
        layer.prepared = tuple(layer.weight.shape)


recorder = types.ModuleType("fp8_recorder")
recorder.Fp8LinearMethod = Fp8LinearMethod
shared_pad_k.install_prepare(context("shared_pad_k", "install_prepare", recorder)[0])
out["linears"] = []
for name, module in model.named_modules():
    if not isinstance(module, linear.LinearBase):
        continue
    n, k = module.weight.shape  # block-FP8 weights and 32x32 ue8m0 scales, as a checkpoint loads them
    module.weight = torch.nn.Parameter(torch.zeros(n, k).to(torch.float8_e4m3fn), requires_grad=False)
    module.weight_scale_inv = torch.nn.Parameter(torch.ones(-(-n // 32), k // 32), requires_grad=False)
    Fp8LinearMethod()._prepare_block_fp8_as_mxfp8(module)
    out["linears"].append({"name": name, "class": type(module).__name__, "recorded": getattr(module, shared_pad_k.NAME_ATTRIBUTE, None),
                           "own_prefix": getattr(module, "prefix", None), "k": k, "prepared_k": module.prepared[1]})

# mxfp8_b12x (and shared_pad_k's input path) on the real fp8_utils: the dispatcher SGLang calls binds its
# partial to the wrappers, and the wrappers take the arguments it passes.
out["linear_params_missing"] = {}
for adapter in ("mxfp8_b12x", "shared_pad_k"):
    ctx, target = context(adapter, "install_linear", fp8_utils)
    out["linear_params_missing"][adapter] = [p for p in target.params if p not in inspect.signature(ctx.current).parameters]
    getattr({"mxfp8_b12x": mxfp8_b12x, "shared_pad_k": shared_pad_k}[adapter], "install_linear")(ctx)
backend = types.SimpleNamespace(is_flashinfer_cutlass=lambda: True)
bound = fp8_utils.dispatch_block_fp8_mxfp8_linear(backend)
func = bound.func
call = inspect.signature(bound).bind("x", "w", "s")
call.apply_defaults()
out["dispatch"] = {"outer": getattr(func, "__rig_adapter__", None),
                   "inner": getattr(getattr(func, "__wrapped__", None), "__rig_adapter__", None),
                   "keywords": dict(bound.keywords),
                   "call": {name: value for name, value in call.arguments.items() if isinstance(value, (str, bool))}}
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def real_sglang(tmp_path_factory):
    from oracles.sglang_classes import unpack

    root = unpack(fetch_wheel("sglang", PINNED), REAL_MODULES, tmp_path_factory.mktemp("sglang"))
    script = (SCRIPT.replace("TESTS", repr(str(REPO / "tests"))).replace("ADAPTER", repr(str(REPO / "adapter")))
              .replace("ROOT", repr(str(root))).replace("REAL", repr(list(REAL_MODULES))))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=root)
    assert result.returncode == 0, result.stderr[-4000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


def test_stock_classes_keep_no_prefix_and_the_adapter_records_the_models_names(real_sglang):
    assert real_sglang["missing_params"] == []
    linears = real_sglang["linears"]
    assert len(linears) == 6  # gate_up_proj and down_proj of the dense MLP and of two shared experts
    for layer in linears:
        assert layer["recorded"] == layer["name"], layer  # the name given as prefix is the module tree's
    shared = [layer for layer in linears if layer["name"].endswith("shared_experts.down_proj")]
    assert [layer["class"] for layer in shared] == ["RowParallelLinear"] * 2
    assert all(layer["own_prefix"] is None for layer in shared)  # what selecting by layer.prefix missed


def test_shared_pad_k_pads_exactly_the_shared_down_proj(real_sglang):
    padded = {layer["name"]: (layer["k"], layer["prepared_k"]) for layer in real_sglang["linears"] if layer["prepared_k"] != layer["k"]}
    assert padded == {"model.layers.1.mlp.shared_experts.down_proj": (64, 128),
                      "model.layers.2.mlp.shared_experts.down_proj": (64, 128)}
    dense = next(layer for layer in real_sglang["linears"] if layer["name"] == "model.layers.0.mlp.down_proj")
    assert (dense["k"], dense["prepared_k"]) == (96, 96)  # K=96 would pad too, had it been picked


def test_mxfp8_targets_are_reached_from_sglangs_own_dispatcher(real_sglang):
    assert real_sglang["linear_params_missing"] == {"mxfp8_b12x": [], "shared_pad_k": []}
    dispatch = real_sglang["dispatch"]
    assert (dispatch["outer"], dispatch["inner"]) == ("shared_pad_k", "mxfp8_b12x")
    assert dispatch["keywords"] == {"backend": "cutlass", "pin_tactic": True}
    assert dispatch["call"] == {"input": "x", "weight": "w", "weight_scale": "s", "backend": "cutlass", "pin_tactic": True}
