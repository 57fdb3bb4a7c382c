"""The engine registry: one declaration per engine, as adapters are (adapter/rig_adapters/registry.py).

Everything rig knows about an engine lives in its row: how it is launched (argv, multi-node
flags), whether it needs GPUs, its distribution name on PyPI (the drift check reads that
wheel), the request fields that pin output length, and the key of its MoE rounding rule in
rig/audit/engine_rounding.yaml. Adding an engine is one row here; recipe validation
(`engine.name`), rendering, boot and load read the row.

This module imports none of the recipe modules (rig/deploy/recipe*.py) at run time, so they can import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from rig.grammar import IMAGE_TAG_VARIABLE, KEY_VARIABLE

if TYPE_CHECKING:
    from rig.deploy.recipe_model import Resolved

MULTINODE_ADDR_VAR = "RIG_DIST_INIT_ADDR"
# The head's host and rendezvous port apart, for an engine that takes them as two flags (vLLM).
MULTINODE_HOST_VAR, MULTINODE_PORT_VAR = "RIG_DIST_INIT_HOST", "RIG_DIST_INIT_PORT"
# Variables rig itself sets in every engine's environment or compose file: never a recipe's.
RIG_OWNED_ENV = (KEY_VARIABLE, "RIG_BOOT_ID", "RIG_ADAPTER_MANIFEST_DIR", "RIG_MANIFEST_DIR", "RIG_MODEL_DIR",
                 IMAGE_TAG_VARIABLE, "RIG_ENGINE", MULTINODE_ADDR_VAR, MULTINODE_HOST_VAR, MULTINODE_PORT_VAR)
ROUNDING_FILE = Path(__file__).resolve().parent / "audit" / "engine_rounding.yaml"
# Every server rig starts, natively or in a container, checks for no update and reaches no network:
# huggingface_hub (under `transformers serve`, and every engine that loads a model through it) touches
# $HF_HOME/.check_for_update_done and asks PyPI for a newer release at start unless
# HF_HUB_DISABLE_UPDATE_CHECK is set; HF_HUB_OFFLINE (TRANSFORMERS_OFFLINE, read as the same) makes
# every hub request fail fast; HF_HUB_DISABLE_IMPLICIT_TOKEN sends no stored token; DO_NOT_TRACK turns
# off the hub's telemetry and vLLM's usage report, VLLM_NO_USAGE_STATS vLLM's alone. A check that
# runs in one boot and not the next prints a line in one boot log only: a false difference between
# the arms of a comparison. Defaults under the recipe's env and an overlay (an explicit setting wins).
NO_NETWORK_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1",
                  "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1", "DO_NOT_TRACK": "1",
                  "VLLM_NO_USAGE_STATS": "1"}
CACHE_RESET_WAIT_S = 60  # how long an engine that can wait for idleness before emptying its cache may take


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
    # --random-seed: SGLang draws one per boot when none is given (server_args.py: random.randint), so
    # boots would differ in their sampling state and in their logged server_args; vLLM's
    # default seed is fixed. A recipe's own --random-seed comes later on the command line and wins.
    argv = ["--model-path", launch.model_path, "--host", launch.host, "--port", launch.port, "--tp-size", str(launch.tp),
            "--random-seed", "0"]
    if launch.ep > 1:
        argv += ["--ep-size", str(launch.ep)]
    return argv


def _sglang_multinode(launch: Launch) -> list[str]:
    return ["--nnodes", str(launch.nodes), "--node-rank", str(launch.node_rank),
            "--dist-init-addr", f"${{{MULTINODE_ADDR_VAR}:?set {MULTINODE_ADDR_VAR} to node 0's host:port}}"]


def _vllm(launch: Launch) -> list[str]:
    argv = [launch.model_path, "--host", launch.host, "--port", launch.port,
            "--tensor-parallel-size", str(launch.tp), "--decode-context-parallel-size", str(launch.dcp)]
    if launch.ep > 1:
        argv += ["--enable-expert-parallel"]
    return argv


def _vllm_multinode(launch: Launch) -> list[str]:
    # vLLM's own multi-node launch (ParallelConfig nnodes/node_rank/master_addr/master_port, 0.24.0 and
    # later): every node runs `vllm serve` with the whole tensor-parallel size; a node other than the
    # head runs --headless (its workers join the head's engine; no API server of its own).
    argv = ["--nnodes", str(launch.nodes), "--node-rank", str(launch.node_rank),
            "--master-addr", f"${{{MULTINODE_HOST_VAR}:?set {MULTINODE_HOST_VAR} to node 0's address}}",
            "--master-port", f"${{{MULTINODE_PORT_VAR}:?set {MULTINODE_PORT_VAR} to node 0's rendezvous port}}"]
    return argv + (["--headless"] if launch.node_rank else [])


def _transformers(launch: Launch) -> list[str]:
    return [launch.model_path, "--host", launch.host, "--port", launch.port]


@dataclass(frozen=True)
class Program:
    """How the server is started: as the image's console command (`vllm serve`), or through a named
    interpreter (`python -m vllm.entrypoints.cli.main serve`) when a native recipe names a Python
    environment. Both reach the same entry point."""

    console: tuple[str, ...]
    module: tuple[str, ...]


@dataclass(frozen=True)
class CacheReset:
    """The POST endpoint that empties the prefix cache, and what the server must have been started
    with for the route to exist at all (rig never turns that on by itself)."""

    path: str
    requires_env: dict[str, str] = field(default_factory=dict)
    why: str = ""
    params: dict[str, str] = field(default_factory=dict)  # query parameters of the POST
    busy: str = ""  # what an answer of 400 means for this engine (said with the error)


@dataclass(frozen=True)
class Engine:
    name: str
    package: str = field(metadata={"doc": "the distribution on PyPI and in the image (drift check)"})
    gpu: bool = field(metadata={"doc": "needs GPUs: GPU compose settings, digest and gpus_per_node rules"})
    program: Program = field(metadata={"doc": "the command that starts the server (console script or python -m)"})
    argv: Callable[[Launch], list[str]] = field(metadata={"doc": "the server's arguments for one node, after the program"})
    multinode: Callable[[Launch], list[str]] | None = field(
        default=None, metadata={"doc": "flags added on every node of a multi-node topology; None = unsupported"})
    length_pinning: dict[str, Any] = field(
        default_factory=dict, metadata={"doc": "request fields that make the server generate exactly max_tokens"})
    rounding: str = field(default="", metadata={"doc": "key in rig/audit/engine_rounding.yaml (default: name)"})
    cache_reset: CacheReset | None = field(
        default=None, metadata={"doc": "how the prefix cache is emptied (rig loadtest --flush-cache)"})
    report_args: tuple[str, ...] = field(
        default=(), metadata={"doc": "flags rig always adds so the server reports what rig measures (cached prompt tokens)"})
    api_key: str | None = field(
        default=None, metadata={"doc": "how the server takes an API key outside argv and logs: 'env:NAME', or None"})
    no_key_reason: str = field(
        default="", metadata={"doc": "why a key is refused (api_key None): rig never serves an endpoint the user thinks is closed"})
    plugin_group: str | None = field(
        default=None, metadata={"doc": "entry-point group the engine loads in every process (adapters arm through it)"})
    scoring: str | None = field(
        default=None, metadata={"doc": "how the engine scores a given token sequence teacher-forced (quality drift); None: it cannot"})
    compile_caches: tuple[tuple[str, str], ...] = field(
        default=(), metadata={"doc": "(variable, default directory) of each compile/kernel cache: a boot is warm when one holds files"})
    optional_caches: tuple[str, ...] = field(
        default=(), metadata={"doc": "compile caches a configuration may never write (a JIT its kernels do not use): "
                                     "empty, they do not keep a boot from counting as warm"})
    cache_subdirs: dict[str, str] = field(
        default_factory=dict, metadata={"doc": "for a cache variable that names a base directory: where under it the cache is"})
    compile_log: tuple[str, str] | None = field(
        default=None, metadata={"doc": "(cache hit, compilation) regexes of the engine's boot log: what the boot really did"})
    owned_flags: tuple[str, ...] = field(
        default=(), metadata={"doc": "flags rig sets (listening address, key, config, topology, served name): "
                                     "refused in recipes, variants and overlays in every spelling (grammar.owned_flag)"})
    allowed_env: tuple[str, ...] = field(
        default=(), metadata={"doc": "loader/interpreter hook variables (env_names.HOOK_VARIABLES) this engine may be given; "
                                     "names or globs"})
    served_name_flag: str | None = field(
        default=None, metadata={"doc": "the flag that sets the served model name from serving.served_model_name; "
                                       "None = the engine cannot rename its model"})
    tokenizer_flags: tuple[str, ...] = field(
        default=(), metadata={"doc": "flags that serve a tokenizer other than the model directory's: where rig reads the "
                                     "served tokenizer (prompt sizes, the scoring check)"})
    unknown_env_line: str | None = field(
        default=None, metadata={"doc": "the boot-log line in which the engine names a variable of its own prefix it does "
                                       "not know (one group: the name); a boot that sets one is refused"})

    def owned_env(self) -> tuple[str, ...]:
        """The variables rig sets for this engine: its own, and the engine's API key variable."""
        key = (self.api_key.removeprefix("env:"),) if self.api_key and self.api_key.startswith("env:") else ()
        return (*RIG_OWNED_ENV, *key)

    def moe_intermediate_multiple(self) -> int:
        """How the engine rounds per-rank MoE shards (rig/audit/engine_rounding.yaml)."""
        table = yaml.safe_load(ROUNDING_FILE.read_text())
        return int(table[self.rounding or self.name]["moe_intermediate_multiple"])


# Compile and kernel caches of every torch-based engine: Triton's kernels and Inductor's code
# (torch/_inductor/runtime/cache_dir_utils.py: /tmp/torchinductor_<user> unless the variable is set).
_TORCH_CACHES = (("TRITON_CACHE_DIR", "~/.triton/cache"), ("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_{user}"))
# vLLM's own root follows XDG_CACHE_HOME (envs.py get_default_cache_root); 0.24 keeps its Inductor
# and Triton output inside torch_compile_cache too, so the boot log says what a boot really reused.
_VLLM_COMPILE_LOG = (r"Directly load the compiled graph|Directly load the \d+-th graph", r"Compiling a graph for")

ENGINES: dict[str, Engine] = {
    engine.name: engine
    for engine in (
        Engine(name="sglang", package="sglang", gpu=True, program=Program(("python3", "-m", "sglang.launch_server"),
                                                                          ("-m", "sglang.launch_server")),
               argv=_sglang, multinode=_sglang_multinode, length_pinning={"ignore_eos": True},
               scoring="sglang-input-logprobs",
               # /flush_cache answers 400 while requests run or wait (http_server.py:1025-1040 in 0.5.23);
               # with ?timeout=S the scheduler defers the flush until it is idle, up to S seconds
               # (managers/scheduler_components/flush_wrapper.py, 0.5.17 and later).
               cache_reset=CacheReset("/flush_cache", params={"timeout": str(CACHE_RESET_WAIT_S)},
                                      busy=f"requests were still running or waiting after SGLang's own {CACHE_RESET_WAIT_S} s wait"),
               report_args=("--enable-cache-report",),  # usage.prompt_tokens_details: cached prompt tokens
               plugin_group="sglang.srt.plugins",
               no_key_reason=("SGLang logs its server arguments, api_key included, at every start "
                              "(launch_server: sglang/srt/entrypoints/engine.py:1185 in 0.5.23, :1059 in 0.5.17; "
                              "_server_args_for_logging redacts only watermark keys): the key "
                              "would land in the boot log; put an authenticating proxy in front of SGLang instead"),
               # FlashInfer JIT-compiles its kernels under $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer
               # (flashinfer/jit/env.py, base: the home directory); DeepGEMM's JIT cache is
               # SGLANG_DG_CACHE_DIR (~/.cache/deep_gemm in 0.5.17, under SGLANG_CACHE_DIR in 0.5.23).
               # Neither is written by a configuration whose kernels do not JIT through it (llama8b-sglang-h200:
               # triton attention, pytorch sampling, bf16), and 0.5.23 keeps DeepGEMM's default inside
               # SGLANG_CACHE_DIR: both are optional to a warm state. rig's cold boots set both variables.
               compile_caches=(("SGLANG_CACHE_DIR", "~/.cache/sglang"), ("FLASHINFER_WORKSPACE_BASE", "~/.cache/flashinfer"),
                               ("SGLANG_DG_CACHE_DIR", "~/.cache/deep_gemm"), *_TORCH_CACHES),
               optional_caches=("FLASHINFER_WORKSPACE_BASE", "SGLANG_DG_CACHE_DIR"),
               cache_subdirs={"FLASHINFER_WORKSPACE_BASE": ".cache/flashinfer"},
               # sglang/srt/server_args.py; --config would let a recipe replace rig's own settings.
               owned_flags=("--model-path", "--model", "--host", "--port", "--api-key", "--admin-api-key", "--config",
                            "--tp-size", "--tensor-parallel-size", "--ep-size", "--expert-parallel-size", "--nnodes",
                            "--node-rank", "--dist-init-addr", "--nccl-init-addr", "--served-model-name"),
               served_name_flag="--served-model-name", tokenizer_flags=("--tokenizer-path",)),  # server_args.py
        # vLLM (0.24.0 .. 0.33.0): /reset_prefix_cache is one of the dev routes registered only with
        # VLLM_SERVER_DEV_MODE=1 (entrypoints/openai/api_server.py), which also opens /sleep,
        # /collective_rpc, /update_weights...; usage.prompt_tokens_details (cached prompt tokens)
        # is filled only with --enable-prompt-tokens-details (entrypoints/openai/cli_args.py).
        Engine(name="vllm", package="vllm", gpu=True, program=Program(("vllm", "serve"), ("-m", "vllm.entrypoints.cli.main", "serve")),
               argv=_vllm, multinode=_vllm_multinode, length_pinning={"ignore_eos": True},
               cache_reset=CacheReset("/reset_prefix_cache", {"VLLM_SERVER_DEV_MODE": "1"},
                                      "vLLM registers it only among its dev routes, which also open /sleep, /collective_rpc "
                                      "and /update_weights to anyone who reaches the port"),
               report_args=("--enable-prompt-tokens-details",), api_key="env:VLLM_API_KEY", scoring="vllm-prompt-logprobs",
               plugin_group="vllm.general_plugins",
               compile_caches=(("VLLM_CACHE_ROOT", "{xdg_cache}/vllm"), *_TORCH_CACHES), compile_log=_VLLM_COMPILE_LOG,
               # vllm/engine/arg_utils.py and entrypoints/openai/cli_args.py.
               owned_flags=("--model", "--host", "--port", "--uds", "--api-key", "--config", "--tensor-parallel-size", "-tp",
                            "--decode-context-parallel-size", "-dcp", "--enable-expert-parallel", "-ep",
                            "--served-model-name", "--nnodes", "-n", "--node-rank", "-r", "--master-addr", "--master-port",
                            "--headless"),
               served_name_flag="--served-model-name", tokenizer_flags=("--tokenizer",),  # arg_utils.py EngineArgs.tokenizer
               # envs.py validate_environ (0.24.0): a warning for every VLLM_* name it does not define.
               unknown_env_line=r"Unknown vLLM environment variable detected: (VLLM_[A-Za-z0-9_]+)"),
        # transformers serve answers 422 to ignore_eos/min_tokens; tiny-cpu's model never emits
        # EOS, so max_tokens alone fixes its length. It takes no API key at all.
        Engine(name="transformers", package="transformers", gpu=False,
               no_key_reason="transformers serve takes no API key at all",
               program=Program(("transformers", "serve"), ("-m", "transformers.cli.transformers", "serve")),
               argv=_transformers, owned_flags=("--host", "--port")),
    )
}

# Request fields that pin the output length, per engine (read by the load runner).
LENGTH_PINNING: dict[str, dict[str, Any]] = {name: engine.length_pinning for name, engine in ENGINES.items()}


def engine(name: str) -> Engine:
    return ENGINES[name]


def server_argv(resolved: Resolved, model_path: str, host: str, node_rank: int | None = None,
                python: str | None = None) -> list[str]:
    """The engine's own command line. `host` is the address the server listens on; `python`, when
    given, starts the engine through that interpreter instead of the console script."""
    recipe, topo = resolved.recipe, resolved.topology
    spec = ENGINES[recipe.engine.name]
    launch = Launch(model_path=model_path, host=host, port=str(recipe.serving.port), tp=topo.tp, ep=topo.ep,
                    dcp=topo.dcp, nodes=topo.nodes, node_rank=node_rank or 0)
    program = [python, *spec.program.module] if python else list(spec.program.console)
    argv = program + spec.argv(launch)
    if topo.nodes > 1 and spec.multinode is not None:
        argv += spec.multinode(launch)
    if recipe.serving.served_model_name and spec.served_name_flag:
        argv += [spec.served_name_flag, recipe.serving.served_model_name]
    return argv + list(spec.report_args) + resolved.server_args

