"""GEMM shapes per rank, derived from model dimensions and a recipe's topology."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import Field, ValidationError

from rig.deploy.recipe import Resolved
from rig.errors import Invalid, RigError
from rig.strict_yaml import load_json_file
from rig.typed import Spec, Tokens, first_problem

AUDIT_DIR = Path(__file__).resolve().parent
MODELS_DIR = AUDIT_DIR / "models"
CONFIG_KEYS = ("hidden_size", "intermediate_size", "moe_intermediate_size", "n_shared_experts", "n_routed_experts",
               "first_k_dense_replace", "num_attention_heads", "num_key_value_heads", "head_dim", "q_lora_rank",
               "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "vocab_size")
CONFIG_MAX_BYTES = 4 << 20  # a config.json is a few kB
# A dimension is a whole number from 0 (the model has none of that part) to 2^24 (vocabularies are ~10^5-10^6).
Dimension = Tokens


class ModelDims(Spec):
    """The model dimensions a shape audit reads: a checkpoint's config.json (these keys of it), or
    a shipped rig/audit/models/<name>.json. None: the model does not say (or has no such part)."""

    name: str | None = None
    source_note: str | None = Field(None, alias="_source")
    hidden_size: Dimension | None = None
    intermediate_size: Dimension | None = None
    moe_intermediate_size: Dimension | None = None
    n_shared_experts: Dimension | None = None
    n_routed_experts: Dimension | None = None
    first_k_dense_replace: Dimension | None = None
    num_attention_heads: Dimension | None = None
    num_key_value_heads: Dimension | None = None
    head_dim: Dimension | None = None
    q_lora_rank: Dimension | None = None
    kv_lora_rank: Dimension | None = None
    qk_nope_head_dim: Dimension | None = None
    qk_rope_head_dim: Dimension | None = None
    v_head_dim: Dimension | None = None
    vocab_size: Dimension | None = None


def _dims(data: object, where: str) -> ModelDims:
    try:
        return ModelDims.model_validate(data)
    except ValidationError as error:
        field, problem = first_problem(error)
        raise Invalid(where, field, problem, "pass a checkpoint's config.json (whole numbers for its dimensions)") from None


@dataclass(frozen=True)
class Gemm:
    family: str  # dense_mlp | shared_expert | routed_experts | attention | lm_head
    layer: str
    n: int
    k: int
    note: str = ""


@dataclass(frozen=True)
class ExpertShard:
    hidden: int
    intermediate: int  # per rank, after the engine's rounding
    unrounded: float
    note: str


def load_dims(name: str | None, model_dir: str | None) -> tuple[ModelDims, str]:
    if model_dir:
        path = Path(model_dir) / "config.json"
        config = load_json_file(path, CONFIG_MAX_BYTES, str(path), missing=("no config.json in the model directory",
                                                                            "pass the checkpoint directory"),
                                fix="pass a checkpoint's config.json, unchanged")
        if isinstance(config, dict) and isinstance(config.get("text_config"), dict):
            config = config["text_config"]
        if not isinstance(config, dict):
            raise Invalid(str(path), "(file)", "the top level is not a JSON object", "pass a checkpoint's config.json, unchanged")
        # Validated before anything is computed from it: a dimension written as a string is refused
        # naming its key, not met as a TypeError in the arithmetic below.
        dims = _dims({key: config.get(key) for key in CONFIG_KEYS}, str(path))
        if dims.head_dim is None and dims.hidden_size and dims.num_attention_heads:
            dims = dims.model_copy(update={"head_dim": dims.hidden_size // dims.num_attention_heads})
        return dims, str(path)
    if not name:
        raise RigError("recipe", "model.dims", "the recipe names no model dimensions", "set model.dims or pass --model-dir")
    path = MODELS_DIR / f"{name}.json"
    if not path.exists():
        raise RigError("recipe", "model.dims", f"no shipped dimensions named {name!r}", f"add rig/audit/models/{name}.json or pass --model-dir")
    return _dims(load_json_file(path, CONFIG_MAX_BYTES, str(path)), str(path)), str(path.relative_to(AUDIT_DIR.parent.parent))


def _split(value: int, parts: int, what: str, missing: list[str]) -> int | None:
    if value % parts:
        missing.append(f"{what} {value} does not split evenly over {parts} ranks")
        return None
    return value // parts


def derive(resolved: Resolved, dims: ModelDims) -> tuple[list[Gemm], ExpertShard | None, list[str]]:
    """Per-rank GEMMs (N = output features, K = contraction) and the routed-expert shard."""
    tp, ep = resolved.topology.tp, resolved.topology.ep
    engine = resolved.recipe.engine.name
    rounding = yaml.safe_load((AUDIT_DIR / "engine_rounding.yaml").read_text())[engine]["moe_intermediate_multiple"]
    gemms: list[Gemm] = []
    unknown: list[str] = []
    hidden = dims.hidden_size
    if not hidden:
        raise RigError("model dimensions", "hidden_size", "unknown", "pass --model-dir with a config.json")

    def need(*keys: str) -> bool:
        missing = [k for k in keys if not getattr(dims, k)]
        if missing:
            unknown.append(", ".join(missing))
        return not missing

    if need("intermediate_size"):
        per_rank = _split(dims.intermediate_size, tp, "intermediate_size", unknown)
        if per_rank:
            gemms += [Gemm("dense_mlp", "mlp.gate_up_proj", 2 * per_rank, hidden, "column-parallel"),
                      Gemm("dense_mlp", "mlp.down_proj", hidden, per_rank, "row-parallel: K sharded")]
    shard = None
    if dims.moe_intermediate_size:
        moe = dims.moe_intermediate_size
        shared = moe * (dims.n_shared_experts or 0)
        if shared:
            per_rank = _split(shared, tp, "shared expert intermediate", unknown)
            if per_rank:
                gemms += [Gemm("shared_expert", "shared_experts.gate_up_proj", 2 * per_rank, hidden, "column-parallel"),
                          Gemm("shared_expert", "shared_experts.down_proj", hidden, per_rank, "row-parallel: K sharded")]
        elif dims.n_shared_experts is None:
            unknown.append("n_shared_experts")
        moe_tp = max(1, tp // ep)
        exact = moe / moe_tp
        per_rank = math.ceil(math.ceil(exact) / rounding) * rounding
        note = (f"{moe} / {moe_tp} = {exact:g}" + (f", rounded by {engine} to a multiple of {rounding}" if per_rank != exact else ""))
        shard = ExpertShard(hidden, per_rank, exact, note)
        gemms += [Gemm("routed_experts", "experts.w13 (gate_up)", 2 * per_rank, hidden, note),
                  Gemm("routed_experts", "experts.w2 (down)", hidden, per_rank, note)]
    if dims.q_lora_rank or dims.kv_lora_rank:
        if need("num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            heads = _split(dims.num_attention_heads, tp, "num_attention_heads", unknown)
            if heads:
                nope, rope, v = dims.qk_nope_head_dim, dims.qk_rope_head_dim, dims.v_head_dim
                gemms += [Gemm("attention", "q_a_proj", dims.q_lora_rank, hidden, "replicated"),
                          Gemm("attention", "q_b_proj", heads * (nope + rope), dims.q_lora_rank, "column-parallel"),
                          Gemm("attention", "kv_a_proj_with_mqa", dims.kv_lora_rank + rope, hidden, "replicated"),
                          Gemm("attention", "kv_b_proj", heads * (nope + v), dims.kv_lora_rank, "column-parallel"),
                          Gemm("attention", "o_proj", hidden, heads * v, "row-parallel")]
    elif need("num_attention_heads", "num_key_value_heads", "head_dim"):
        heads = _split(dims.num_attention_heads, tp, "num_attention_heads", unknown)
        kv = max(1, dims.num_key_value_heads // tp)
        if heads:
            head_dim = dims.head_dim
            gemms += [Gemm("attention", "qkv_proj", (heads + 2 * kv) * head_dim, hidden, "column-parallel"),
                      Gemm("attention", "o_proj", hidden, heads * head_dim, "row-parallel")]
    if need("vocab_size"):
        gemms.append(Gemm("lm_head", "lm_head", math.ceil(dims.vocab_size / tp), hidden, "vocab-parallel"))
    return gemms, shard, unknown
