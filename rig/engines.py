"""The engine registry: one declaration per engine, as adapters are (adapter/rig_adapters/registry.py).

Everything rig knows about an engine lives in its row: how it is launched (argv, multi-node
flags), whether it needs GPUs, its distribution name on PyPI (the drift check reads that
wheel), the request fields that pin output length, and the key of its MoE rounding rule in
rig/audit/engine_rounding.yaml. Adding an engine is one row here; recipe validation
(`engine.name`), rendering, boot and load read the row.

This module imports nothing from rig.recipe at run time, so rig.recipe can import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from rig.recipe import Resolved

MULTINODE_ADDR_VAR = "RIG_DIST_INIT_ADDR"
# Variables rig itself sets in every engine's environment or compose file: never a recipe's.
RIG_OWNED_ENV = ("RIG_API_KEY", "RIG_BOOT_ID", "RIG_ADAPTER_MANIFEST_DIR", "RIG_MANIFEST_DIR", "RIG_MODEL_DIR",
                 "RIG_IMAGE_TAG", MULTINODE_ADDR_VAR)
ROUNDING_FILE = Path(__file__).resolve().parent / "audit" / "engine_rounding.yaml"


@dataclass(frozen=True)
class Launch:
    """What the argv builder gets: the resolved topology and where to serve."""

    model_path: str
    host: str
    port: str
    tp: int
    ep: int
    dcp: int
    nodes: int
    node_rank: int


def _sglang(launch: Launch) -> list[str]:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", launch.model_path,
            "--host", launch.host, "--port", launch.port, "--tp-size", str(launch.tp)]
    if launch.ep > 1:
        argv += ["--ep-size", str(launch.ep)]
    return argv


def _sglang_multinode(launch: Launch) -> list[str]:
    return ["--nnodes", str(launch.nodes), "--node-rank", str(launch.node_rank),
            "--dist-init-addr", f"${{{MULTINODE_ADDR_VAR}:?set {MULTINODE_ADDR_VAR} to node 0's host:port}}"]


def _vllm(launch: Launch) -> list[str]:
    argv = ["vllm", "serve", launch.model_path, "--host", launch.host, "--port", launch.port,
            "--tensor-parallel-size", str(launch.tp), "--decode-context-parallel-size", str(launch.dcp)]
    if launch.ep > 1:
        argv += ["--enable-expert-parallel"]
    return argv


def _transformers(launch: Launch) -> list[str]:
    return ["transformers", "serve", launch.model_path, "--host", launch.host, "--port", launch.port]


@dataclass(frozen=True)
class Engine:
    name: str
    package: str = field(metadata={"doc": "the distribution on PyPI and in the image (drift check)"})
    gpu: bool = field(metadata={"doc": "needs GPUs: GPU compose settings, digest and gpus_per_node rules"})
    argv: Callable[[Launch], list[str]] = field(metadata={"doc": "the server command line for one node"})
    multinode: Callable[[Launch], list[str]] | None = field(
        default=None, metadata={"doc": "flags added on every node of a multi-node topology; None = unsupported"})
    length_pinning: dict[str, Any] = field(
        default_factory=dict, metadata={"doc": "request fields that make the server generate exactly max_tokens"})
    rounding: str = field(default="", metadata={"doc": "key in rig/audit/engine_rounding.yaml (default: name)"})
    cache_reset: str | None = field(
        default=None, metadata={"doc": "POST endpoint that empties the prefix cache (rig loadtest --flush-cache)"})
    owned_flags: tuple[str, ...] = field(
        default=(), metadata={"doc": "flags rig sets (listening address, key, config, topology, served name): "
                                     "refused in recipes, variants and overlays in every spelling (grammar.owned_flag)"})
    owned_env: tuple[str, ...] = field(
        default=(), metadata={"doc": "environment variables rig sets for this engine (the API key's): refused in recipes"})
    allowed_env: tuple[str, ...] = field(
        default=(), metadata={"doc": "loader/interpreter hook variables (grammar.HOOK_VARIABLES) this engine may be given; "
                                     "names or globs"})
    served_name_flag: str | None = field(
        default=None, metadata={"doc": "the flag that sets the served model name from serving.served_model_name; "
                                       "None = the engine cannot rename its model"})

    def moe_intermediate_multiple(self) -> int:
        """How the engine rounds per-rank MoE shards (rig/audit/engine_rounding.yaml)."""
        table = yaml.safe_load(ROUNDING_FILE.read_text())
        return int(table[self.rounding or self.name]["moe_intermediate_multiple"])


ENGINES: dict[str, Engine] = {
    engine.name: engine
    for engine in (
        Engine(name="sglang", package="sglang", gpu=True, argv=_sglang, multinode=_sglang_multinode,
               length_pinning={"ignore_eos": True}, cache_reset="/flush_cache",
               # sglang/srt/server_args.py; --config is how rig hands SGLang its API key (rig/render.py).
               owned_flags=("--model-path", "--model", "--host", "--port", "--api-key", "--admin-api-key", "--config",
                            "--tp-size", "--tensor-parallel-size", "--ep-size", "--expert-parallel-size", "--nnodes",
                            "--node-rank", "--dist-init-addr", "--nccl-init-addr", "--served-model-name"),
               served_name_flag="--served-model-name"),
        Engine(name="vllm", package="vllm", gpu=True, argv=_vllm, length_pinning={"ignore_eos": True},
               cache_reset="/reset_prefix_cache",
               # vllm/engine/arg_utils.py and entrypoints/openai/cli_args.py; vLLM reads the key from VLLM_API_KEY.
               owned_flags=("--model", "--host", "--port", "--uds", "--api-key", "--config", "--tensor-parallel-size", "-tp",
                            "--decode-context-parallel-size", "-dcp", "--enable-expert-parallel", "-ep",
                            "--served-model-name"),
               owned_env=("VLLM_API_KEY",), served_name_flag="--served-model-name"),
        # transformers serve answers 422 to ignore_eos/min_tokens; tiny-cpu's model never emits
        # EOS, so max_tokens alone fixes its length.
        Engine(name="transformers", package="transformers", gpu=False, argv=_transformers,
               owned_flags=("--host", "--port")),
    )
}

# Request fields that pin the output length, per engine (read by the load runner).
LENGTH_PINNING: dict[str, dict[str, Any]] = {name: engine.length_pinning for name, engine in ENGINES.items()}


def engine(name: str) -> Engine:
    return ENGINES[name]


def server_argv(resolved: Resolved, model_path: str, host: str, node_rank: int | None = None) -> list[str]:
    """The engine's own command line. `host` is the address the server listens on."""
    recipe, topo = resolved.recipe, resolved.topology
    spec = ENGINES[recipe.engine.name]
    launch = Launch(model_path=model_path, host=host, port=str(recipe.serving.port), tp=topo.tp, ep=topo.ep,
                    dcp=topo.dcp, nodes=topo.nodes, node_rank=node_rank or 0)
    argv = spec.argv(launch)
    if topo.nodes > 1 and spec.multinode is not None:
        argv += spec.multinode(launch)
    if recipe.serving.served_model_name and spec.served_name_flag:
        argv += [spec.served_name_flag, recipe.serving.served_model_name]
    return argv + resolved.server_args
