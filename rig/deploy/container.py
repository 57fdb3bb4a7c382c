"""What every rendered deployment of a recipe shares, compose file and Kubernetes manifest alike:
the image rig builds, where the adapters write their manifests, the entrypoint that hands the API
key to the engine, and the file name of a recipe variant."""

from __future__ import annotations

from rig.deploy.recipe import Recipe, Resolved
from rig.engines import ENGINES

IMAGE_MANIFEST_DIR = "/rig/manifests"
# The API key is read from the container's environment at start (RIG_API_KEY), never written to a
# layer, and never put on the engine's command line (host `ps`, `docker top` and /proc/*/cmdline
# show argv to anyone). An engine with a way to read it outside argv and its logs gets it that way
# (vLLM: VLLM_API_KEY, dropped by its child processes; rig_adapters.runtime) and RIG_API_KEY is
# unset before it starts; an engine without one (rig/engines.py no_key_reason) refuses to start
# with the key set, one line on stderr, instead of serving an endpoint the user believes is closed.


def _api_key_script(engine: str) -> str:
    row = ENGINES[engine]
    if row.api_key is not None and row.api_key.startswith("env:"):
        name = row.api_key.removeprefix("env:")
        return f'if [ -n "${{RIG_API_KEY:-}}" ]; then export {name}="$RIG_API_KEY"; fi; unset RIG_API_KEY; exec "$@"'
    reason = row.no_key_reason.replace("'", "").replace('"', "")
    return (f'if [ -n "${{RIG_API_KEY:-}}" ]; then echo "rig: RIG_API_KEY is set but rig will not hand {engine} a key: '
            f'{reason}; unset RIG_API_KEY" >&2; exit 2; fi; exec "$@"')


def api_key_command(engine: str) -> list[str]:
    """The entrypoint that hands RIG_API_KEY to `engine` without argv; the server's argv follows it."""
    return ["/bin/sh", "-c", _api_key_script(engine), "rig-serve"]


def image_name(recipe: Recipe) -> str:
    return f"rig/{recipe.name}"


def file_stem(resolved: Resolved) -> str:
    """`<recipe>` for the default variant, `<recipe>.<variant>` for the others: compose/ and k8s/ alike."""
    return resolved.slug if resolved.variant != resolved.recipe.default_variant else resolved.recipe.name
