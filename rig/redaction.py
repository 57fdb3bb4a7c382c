"""What rig may write down by value, and the one function that redacts everything else.

A boot's environment overlay (`rig up --env`, `rig compare --arm`) can carry anything, an
HF_TOKEN included. Only names whose values are facts about the experiment are recorded by
value: the adapter registry's gates and settings (what an arm toggles), the recipe's own env
keys (already public in the committed recipe) and rig's image-tag selector. Every other value
becomes REDACTED in boot records, state, compose overrides, provenance and comparisons; the
server still receives the real value through its process environment. A secret-looking name
(env_names.secret_looking: HF_TOKEN, *_API_KEY, ...) is never recorded by value, whatever a
recipe or the registry declares.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from rig.grammar import IMAGE_TAG_VARIABLE

if TYPE_CHECKING:
    from rig.deploy.recipe import Resolved

REDACTED = "<redacted>"
# Compose variables rig itself reads (rig/boot/compose.py): they pick an image, they are no secret.
RIG_VARIABLES = frozenset({IMAGE_TAG_VARIABLE})


def registry_keys() -> frozenset[str]:
    """Every gate and setting an adapter in the registry reads."""
    from rig_adapters.registry import REGISTRY

    return frozenset(key for spec in REGISTRY for key in (spec.gate, *spec.settings))


def recordable_keys(resolved: Resolved | None = None) -> frozenset[str]:
    """Names recorded by value: registry gates/settings, rig's variables and, given a resolved
    recipe, every env key the recipe (and its variant) sets itself."""
    from rig.env_names import secret_looking

    keys = registry_keys() | RIG_VARIABLES
    if resolved is not None:
        keys |= frozenset(resolved.full_env())
    return frozenset(key for key in keys if not secret_looking(key))


def redact(env: Mapping[str, str], allowed: Collection[str]) -> dict[str, str]:
    """A copy of `env` in which every value whose name is not in `allowed` is REDACTED."""
    return {key: (value if key in allowed else REDACTED) for key, value in env.items()}


def redact_for(resolved: Resolved, env: Mapping[str, str]) -> dict[str, str]:
    """`redact` with the names a boot of `resolved` may record."""
    return redact(env, recordable_keys(resolved))


def split_recordable(env: Mapping[str, str], allowed: Collection[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(recordable, secret): for a writer that must still hand the secret values on, e.g. a
    compose override lists secret names as pass-through (`environment: [NAME]`) and passes
    their values through `docker compose`'s own process environment."""
    recordable = {key: value for key, value in env.items() if key in allowed}
    secret = {key: value for key, value in env.items() if key not in allowed}
    return recordable, secret


def compose_environment(env: Mapping[str, str], allowed: Collection[str]) -> tuple[list[str], dict[str, str]]:
    """For a compose override file: (its `environment:` list, the variables to add to
    `docker compose`'s own process environment). Recordable names are written as NAME=value
    ($ doubled: a literal value, not a compose variable); every other name is written bare,
    which compose resolves from its process environment at `up`, so the value reaches the
    container without being written to the file."""
    recordable, secret = split_recordable(env, allowed)
    entries = [f"{key}={value.replace('$', '$$')}" for key, value in recordable.items()] + sorted(secret)
    return entries, secret
