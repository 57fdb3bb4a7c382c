"""What rig owns, refused in a recipe, a variant or an overlay: the engine flags rig sets itself
(in every spelling the engine's parser accepts), the environment names rig or the engine's key
handling sets, loader and interpreter hooks, secrets in a committed file, and names in rig's own
namespaces that nothing reads (a misspelled adapter gate would boot an arm identical to its
baseline). Each refusal is one RigError line: file, field, fix."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rig import grammar
from rig.deploy.recipe_model import PROCESS_DRIVERS, Recipe, Resolved
from rig.engines import ENGINES
from rig.env_names import hook_variable, secret_looking
from rig.errors import RigError

_OWNED_FLAG_FIXES = (  # (word in the flag, where the recipe says it instead)
    ("api-key", "the API key comes from RIG_API_KEY in the environment only"),
    ("config", "write the settings as server_args (a config file would replace what rig sets)"),
    ("served-model-name", "set serving.served_model_name"),
    ("host", "set serving.bind"), ("uds", "set serving.bind"), ("port", "set serving.port (or --port of rig up, compare or tune)"),
    ("model", "set model.path"),
)


def _owned_flag_fix(flag: str) -> str:
    for word, fix in _OWNED_FLAG_FIXES:
        if word in flag:
            return f"remove it: {fix}"
    return "remove it: set topology (tp, ep, dcp, nodes) instead"


OWNED_FIX = "remove it (the API key comes from RIG_API_KEY in rig's environment; image tags from --arm NAME:image=TAG)"
UNIT_SUFFIXES = ("_NS", "_US", "_MS", "_S")


def _adapter_env_names() -> dict[str, tuple[Any, str]]:
    """Every name an adapter reads from the environment: its spec, and "gate" or "setting"."""
    from rig_adapters.registry import REGISTRY

    return {spec.gate: (spec, "gate") for spec in REGISTRY} | {
        setting: (spec, "setting") for spec in REGISTRY for setting in spec.settings}


def unread_rig_name(name: str, engine: str) -> tuple[str, str] | None:
    """(problem, fix) for a name in rig's own namespaces (RIG_, and the prefix of every adapter gate,
    such as DSV41_, in any case) that no adapter reads and rig does not set: a misspelled gate
    (RIG_TOKEN_DELAY for RIG_TOKEN_DELAY_MS, or rig_token_delay_ms) would otherwise boot an arm
    identical to its baseline, and the comparison would report no effect of a change it never
    made. The names rig sets are refused before this (refuse_env_name)."""
    import difflib

    owner = _adapter_env_names()
    namespaces = ("RIG_", *sorted({gate.split("_", 1)[0] + "_" for gate in owner}))
    upper = name.upper()
    if name in owner or not upper.startswith(namespaces):
        return None
    owned = ENGINES[engine].owned_env()
    if upper in owned:
        return f"{name} is not {upper}, which rig sets itself (environment names are case-sensitive)", OWNED_FIX
    if upper in owner:
        return f"{name} is not {upper}: environment names are case-sensitive", f"write {upper}"
    problem = f"no adapter reads {name}, and rig does not set it"
    candidates = [key for key, (spec, _) in owner.items() if engine in spec.engines] + list(owned)
    close = next(iter(difflib.get_close_matches(upper, candidates, n=1, cutoff=0.72)), None)
    if close is None:
        listing = ", ".join(sorted(key for key, (spec, _) in owner.items() if engine in spec.engines))
        return problem, f"use an adapter's gate or setting for {engine} (`rig adapters list`): {listing}"
    if close in owned:
        return problem, f"did you mean {close}? rig sets that itself: {OWNED_FIX}"
    spec, kind = owner[close]
    unit = next((u for u in UNIT_SUFFIXES if close.endswith(u)), None)
    written = next((u for u in UNIT_SUFFIXES if upper.endswith(u)), None)
    note = f"; its unit is {unit[1:].lower()}, not {written[1:].lower()}" if unit and written and unit != written else ""
    return problem, f"did you mean {close} ({spec.name}'s {kind}{note})?"


def refuse_env_name(name: str, engine: str, where: str, field: str, overlay: bool = False) -> None:
    """An environment name a recipe (or, with `overlay`, an arm or `rig up --env`) may not set: one
    rig or the engine's key handling sets, a loader or interpreter hook the engine's registry row
    does not allow, or (in a committed recipe) a secret."""
    spec = ENGINES[engine]
    if name in spec.owned_env():
        raise RigError(where, field, f"{name} is set by rig itself", OWNED_FIX)
    unread = unread_rig_name(name, engine)
    if unread:
        raise RigError(where, field, *unread)
    hook = hook_variable(name, spec.allowed_env)
    if hook:
        raise RigError(where, field, f"{name} is a loader/interpreter hook: {hook}",
                       f"remove it, or allow it for {engine} in Engine.allowed_env (rig/engines.py) once it is needed")
    if not overlay and secret_looking(name):
        raise RigError(where, field, f"{name} looks like a secret, and a recipe is committed and rendered into compose",
                       f"pass it at boot: rig up --env {name}=... (recorded redacted)")


def check_rig_owned(recipe: Recipe, where: str) -> None:
    """Server args never set a flag rig owns, in any spelling; env never sets what rig owns, a
    hook, or a secret. Checked for the recipe and each variant (arms become variants)."""
    engine = recipe.engine.name
    owned = ENGINES[engine].owned_flags
    sources = [("", recipe.server_args, recipe.env, recipe.adapters, recipe.host_env)]
    sources += [(f"variants.{name}.", variant.server_args, variant.env, variant.adapters or [], variant.host_env)
                for name, variant in recipe.variants.items()]
    for prefix, args, env, adapters, host_env in sources:
        for name in host_env:
            refuse_env_name(name, engine, where, f"{prefix}host_env.{name}")
            if name in env or name in recipe.env:
                raise RigError(where, f"{prefix}host_env.{name}", f"{name} is also set in env", "set it in one of them")
            if recipe.driver in PROCESS_DRIVERS:
                raise RigError(where, f"{prefix}host_env.{name}", "host_env is read by compose; the native driver has none",
                               f"set {name} in env, or pass it with rig up --env")
        for index, token in enumerate(args):
            flag = grammar.owned_flag(token, owned)
            if flag:
                what = "ends option parsing (rig's own flags follow)" if flag == "--" else f"sets {flag}, which rig owns for {engine}"
                raise RigError(where, f"{prefix}server_args.{index}", f"{token!r} {what}", _owned_flag_fix(flag))
        for name in env:
            refuse_env_name(name, engine, where, f"{prefix}env.{name}")
        for use in adapters:  # registry names; a hook among them would be a registry bug, refused all the same
            for name in use.gates:
                refuse_env_name(name, engine, where, f"{prefix}adapters.{use.name}.gates.{name}")


def refuse_inherited_gates(resolved: Resolved, overlay: dict[str, str], environ: Mapping[str, str]) -> None:
    """A native server inherits rig's own environment (rig/boot/native.py). An adapter's gate or
    setting there would reach the engine unseen: not in the boot's record, its adapter not expected
    ARMED by the boot check, so one that refuses (sm_90 for a Blackwell-only adapter, a value it
    rejects) would leave a server without it that rig calls up (measured: RIG_TOKEN_DELAY_MS=abc in
    the shell, `rig up tiny-cpu` exited 0 with token_delay REFUSED in its log). A gate reaches a boot
    through the recipe or an overlay only, where both checks see it."""
    if resolved.recipe.driver not in PROCESS_DRIVERS:
        return  # a container gets only the environment its compose file names
    names = _adapter_env_names()
    given = {**resolved.full_env(), **overlay}
    inherited = sorted(name for name in environ if name in names and name not in given)
    if inherited:
        first = inherited[0]
        raise RigError("environment", first, f"{', '.join(inherited)} set in rig's own environment would reach the native server "
                       "unchecked (its adapter not expected ARMED, the boot's record not naming it)",
                       f"unset {first}, and pass it as `rig up --env {first}=VALUE` or in an arm, where rig checks it")


def check_overlay(resolved: Resolved, env: dict[str, str], where: str, field: str) -> None:
    """An environment overlay (rig up --env, an arm): no rig-owned name, no hook; secrets are allowed
    (they reach the server through the environment and are recorded redacted). A native boot takes
    no adapter gate from rig's own environment (refuse_inherited_gates)."""
    refuse_inherited_gates(resolved, env, os.environ)
    for name, value in env.items():
        if name == grammar.IMAGE_TAG_VARIABLE:  # compose's image selector: the tag grammar `image=` gets
            try:
                grammar.tag(value)
            except ValueError as error:
                raise RigError(where, f"{field} {name}", str(error), "name a tag built by `rig build`") from None
            continue
        refuse_env_name(name, resolved.recipe.engine.name, where, f"{field} {name}", overlay=True)
