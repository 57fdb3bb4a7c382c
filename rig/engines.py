"""How each engine is launched: the one place that turns a resolved recipe into argv."""

from __future__ import annotations

from rig.recipe import Resolved

MULTINODE_ADDR_VAR = "RIG_DIST_INIT_ADDR"


def server_argv(resolved: Resolved, model_path: str, host: str, node_rank: int | None = None) -> list[str]:
    """The engine's own command line. `host` is the address the server listens on."""
    recipe, topo = resolved.recipe, resolved.topology
    port = str(recipe.serving.port)
    engine = recipe.engine.name
    if engine == "sglang":
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", model_path,
                "--host", host, "--port", port, "--tp-size", str(topo.tp)]
        if topo.ep > 1:
            argv += ["--ep-size", str(topo.ep)]
        if topo.nodes > 1:
            argv += ["--nnodes", str(topo.nodes), "--node-rank", str(node_rank or 0),
                     "--dist-init-addr", f"${{{MULTINODE_ADDR_VAR}:?set {MULTINODE_ADDR_VAR} to node 0's host:port}}"]
    elif engine == "vllm":
        argv = ["vllm", "serve", model_path, "--host", host, "--port", port,
                "--tensor-parallel-size", str(topo.tp), "--decode-context-parallel-size", str(topo.dcp)]
        if topo.ep > 1:
            argv += ["--enable-expert-parallel"]
    else:
        argv = ["transformers", "serve", model_path, "--host", host, "--port", port]
    return argv + resolved.server_args



# Request fields that pin the output length, per engine. transformers serve answers 422 to
# ignore_eos/min_tokens; tiny-cpu's model never emits EOS, so max_tokens alone fixes its length.
LENGTH_PINNING: dict[str, dict[str, object]] = {
    "sglang": {"ignore_eos": True},
    "vllm": {"ignore_eos": True},
    "transformers": {},
}
