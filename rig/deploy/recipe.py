"""Recipes as data: `recipes/<name>.yaml`, read strictly into the typed schema (rig/deploy/recipe_model.py).

A recipe is the only place a deployment is described. Everything else (Dockerfile, compose
file, the boot command, load-test provenance) is derived from it. `parse_recipe` turns every
problem into one RigError line: file, field, fix. The rules that span fields (digests, adapters,
fork-only knobs, variants) are checked here once the schema holds; what a recipe may not set
because rig owns it is rig/deploy/recipe_owned.py.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from pydantic import ValidationError

from rig import grammar
from rig.deploy.recipe_model import PROCESS_DRIVERS, Recipe, Resolved
from rig.deploy.recipe_owned import check_rig_owned
from rig.engines import ENGINES
from rig.errors import Invalid, RigError
from rig.paths import DATA_DIR, PACKAGE_DIR, REPO_ROOT
from rig.strict_yaml import load_yaml_file
from rig.typed import misspelled

RECIPES_DIR = REPO_ROOT / "recipes"
RECIPE_MAX_BYTES = 256 << 10  # the largest recipe is about 3 kB


def _field_path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


_FIXES = {
    "extra_forbidden": "remove it or check its spelling against the recipe format in README.md",
    "missing": "add it",
    "string_pattern_mismatch": "use the documented form",
    "literal_error": "use one of the listed values",
    "int_type": "write a plain whole number, unquoted (not true/false, not a string, not a float)",
    "string_type": "quote the value so YAML reads it as a string",
    "bool_type": "write true or false, unquoted",
    "list_type": "write a YAML list",
    "dict_type": "write a YAML mapping",
    "model_type": "write a YAML mapping",
    "greater_than_equal": "use a larger value",
    "less_than_equal": "use a smaller value",
    "too_long": "use fewer (the bound is in the message)",
}
# Grammar errors (rig/grammar.py): the fix names the form, by the field's last name.
_FIELD_FIXES = {
    "repository": "write the image repository as in `docker pull`, e.g. lmsysorg/sglang or ghcr.io/org/name",
    "tag": "write a versioned tag, e.g. v0.5.23-cu129",
    "path": "write an absolute path inside the container, e.g. /models/DeepSeek-V4.1-Flash",
    "pip_install": "pin each package exactly: name==version (extras allowed: name[extra]==version)",
    "health": "write the path only, e.g. /health",
    "bind": "write an IP address of this host, e.g. 127.0.0.1 (IPv6 without a %scope)",
    "name": "name the recipe with lowercase letters, digits and - (at most 63), like its file",
    "served_model_name": "write a plain model name, e.g. glm-5.2",
    "server_args": "write each argument literally: no '$' (compose would substitute it), no RIG_API_KEY",
    "env": "write the value literally: no '$' (compose would substitute it), no RIG_API_KEY",
    "gates": "write the value literally: no '$' (compose would substitute it), no RIG_API_KEY",
    "host_env": "write NAME: default (rig renders ${NAME:-default}); a plain default, no '$'",
    "shm_size": "write a Docker size, e.g. 32gb",
    "gpu_ids": "list each device id once, each >= 0",
    "adapters": "list each adapter once, with all its gates",
    "must": "write an RE2 pattern: a literal string or a short pattern, flags scoped as (?i:...)",
    "forbid": "write an RE2 pattern: a literal string or a short pattern, flags scoped as (?i:...)",
    "variants": "name variants like recipes: lowercase letters, digits and -",
    "[key]": "name environment variables with letters, digits and _ (not starting with a digit)",
}


def _fix_for(error: dict[str, Any]) -> str:
    names = [str(part) for part in error["loc"] if not isinstance(part, int)]
    if error["type"] == "value_error":
        for name in reversed(names):
            if name in _FIELD_FIXES:
                return _FIELD_FIXES[name]
    if error["type"] == "string_pattern_mismatch" and "sha256" in str((error.get("ctx") or {}).get("pattern", "")):
        return "write the digest as sha256: followed by 64 lowercase hex digits, read from the registry (`rig pin`)"
    return _FIXES.get(error["type"], "see the recipe format in README.md")


def _read_raw(path: Path, where: str) -> Any:
    """The file's YAML, strictly (rig/strict_yaml.py); every way a file can be unreadable is one RigError line."""
    # the close names are looked for only when the file is missing (a recipe parse is on every comparison's path)
    listing = _close_recipes(path) if not path.exists() else f"see `rig validate` for the recipes in {_display(RECIPES_DIR)}"
    return load_yaml_file(path, RECIPE_MAX_BYTES, where, missing=("no such recipe", listing),
                          fix="write the recipe as plain UTF-8 YAML, each key once, like recipes/*.yaml")


def _close_recipes(path: Path) -> str:
    import difflib

    close = difflib.get_close_matches(path.stem, [p.stem for p in RECIPES_DIR.glob("*.yaml")], n=3, cutoff=0.6)
    return (f"did you mean {' or '.join(close)}? (`rig validate` lists the recipes in {_display(RECIPES_DIR)})" if close
            else f"see `rig validate` for the recipes in {_display(RECIPES_DIR)}")


def parse_recipe(path: Path) -> Recipe:
    """Parse and validate one file; every failure is a one-line RigError."""
    where = _display(path)
    raw = _read_raw(path, where)
    if not isinstance(raw, dict):
        raise RigError(where, "(top level)", "a recipe must be a mapping", "start from an existing recipe in recipes/")
    control = grammar.find_control_characters(raw)
    if control:
        field, char = control
        raise RigError(where, field, f"contains the control character {char} (it could inject lines into rendered files)",
                       "remove it; write multi-word values on one line")
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as error:
        typo = misspelled(error)
        if typo:
            loc, problem, fix = typo
            raise Invalid(where, _field_path(loc), problem, fix) from None
        first = error.errors()[0]
        message = " ".join(first["msg"].removeprefix("Value error, ").split())
        raise Invalid(where, _field_path(first["loc"]), message, _fix_for(first)) from None
    if recipe.name != path.stem:
        raise RigError(where, "name", f"name {recipe.name!r} differs from the file name", f"rename the file to {recipe.name}.yaml or set name: {path.stem}")
    check_semantics(recipe, where)
    return recipe


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


# Package data, read once per process (every recipe parse checks against them).
@functools.cache
def _fork_knobs() -> Mapping[str, str]:
    return MappingProxyType(yaml.safe_load((DATA_DIR / "fork_knobs.yaml").read_text()))


@functools.cache
def _known_backends() -> frozenset[str]:
    return frozenset(yaml.safe_load((PACKAGE_DIR / "audit" / "constraints.yaml").read_text()))


def check_semantics(recipe: Recipe, where: str) -> None:
    """Rules that span fields: digests, adapters, fork-only knobs, variants."""
    from rig_adapters.registry import BY_NAME

    image = recipe.image
    engine_row = ENGINES[recipe.engine.name]
    if image is None and recipe.driver == "compose":
        raise RigError(where, "image", "a compose recipe needs the image it builds and boots", "add image: {repository, tag, digests}")
    if recipe.native is not None and recipe.driver not in PROCESS_DRIVERS:
        raise RigError(where, "native", "native names the engine's Python environment, but the recipe boots with compose",
                       "set driver: native, or remove native")
    if recipe.model.source == "generated" and not recipe.model.generate:
        raise RigError(where, "model.generate", "a generated model needs its preset", "name one of rig/data/generated_models.json")
    if recipe.model.generate:
        from rig.tinymodel import preset_names

        if recipe.model.source != "generated":
            raise RigError(where, "model.generate", "only a generated model has a preset", "set model.source: generated, or remove generate")
        if recipe.model.generate not in preset_names():
            raise RigError(where, "model.generate", f"no preset {recipe.model.generate!r}", f"use one of {', '.join(preset_names())}")
        from rig.tinymodel import presets

        dummy = presets()[recipe.model.generate]["weights"] == "dummy"
    if recipe.driver in PROCESS_DRIVERS and recipe.gpu and recipe.native is None:
        raise RigError(where, "native", f"a native {recipe.engine.name} recipe must name the engine's Python environment",
                       "add native: {python: /path/to/python3, pythonpath: [...]} (or venv: /path/to/venv)")
    variants = [recipe.variant(None)] if not recipe.variants else [recipe.variant(n) for n in recipe.variants]
    if recipe.default_variant and recipe.default_variant not in recipe.variants:
        raise RigError(where, "default_variant", f"{recipe.default_variant!r} is not a variant", f"use one of {', '.join(recipe.variants)}")
    check_rig_owned(recipe, where)
    knobs = _fork_knobs()
    known_backends = _known_backends()
    for resolved in variants:
        prefix = f"variants.{resolved.variant}." if resolved.variant else ""
        for kind in ("dense", "experts"):
            for backend in getattr(resolved.audit, kind):
                if backend not in known_backends:
                    raise RigError(where, f"{prefix}audit.{kind}", f"unknown backend {backend!r}",
                                   f"use one of {', '.join(sorted(known_backends))} (rig/audit/constraints.yaml)")
        platform = resolved.topology.platform
        if resolved.adapters and recipe.native is not None and engine_row.plugin_group is None:
            raise RigError(where, f"{prefix}adapters", f"{recipe.engine.name} has no plugin mechanism to arm adapters in another "
                           "Python environment (rig's .pth arms them only in rig's own)", "remove native (run the engine "
                           "from rig's environment) or the adapters")
        if recipe.model.generate and dummy and not _draws_dummy_weights(resolved.server_args):
            raise RigError(where, f"{prefix}server_args", f"preset {recipe.model.generate} has no weight files: the engine must "
                           "draw them", "add --load-format dummy")
        if recipe.driver == "native" and resolved.topology.nodes > 1:
            raise RigError(where, f"{prefix}topology.nodes", "the native driver boots one host", "use the compose recipe per node")
        if image is not None and recipe.gpu and not image.digest_for(platform) and not image.unpinned:
            raise RigError(
                where, f"image.digests.{platform}", f"GPU recipe has no digest for {platform}",
                "run `rig pin` on a machine that reaches the registry, or set image.unpinned: true until then",
            )
        if recipe.gpu and not resolved.topology.gpus_per_node:
            raise RigError(where, f"{prefix}topology.gpus_per_node", "a GPU recipe must say how many GPUs each node has", "set gpus_per_node")
        for use in resolved.adapters:
            spec = BY_NAME.get(use.name)
            if spec is None:
                raise RigError(where, f"{prefix}adapters", f"unknown adapter {use.name!r}", f"use one of {', '.join(sorted(BY_NAME))} (`rig adapters list`)")
            if recipe.engine.name not in spec.engines:
                raise RigError(where, f"{prefix}adapters.{use.name}", f"adapter targets {', '.join(spec.engines)}, recipe runs {recipe.engine.name}", "remove it from this recipe")
            if spec.recipes and recipe.name not in spec.recipes:
                raise RigError(where, f"{prefix}adapters.{use.name}", f"adapter is scoped to {', '.join(spec.recipes)}",
                               f"add {recipe.name} to its scope in adapter/rig_adapters/registry.py once it is qualified there")
            allowed = {spec.gate, *spec.settings}
            unknown = sorted(set(use.gates) - allowed)
            if unknown:
                raise RigError(where, f"{prefix}adapters.{use.name}.gates", f"{', '.join(unknown)} is not read by {use.name}", f"use {', '.join(sorted(allowed))}")
            if spec.gate not in use.gates:
                raise RigError(where, f"{prefix}adapters.{use.name}.gates", f"the gate {spec.gate} is not set", f"add {spec.gate}: '1'")
            problem = spec.gate_problem(use.gates[spec.gate])
            if problem:  # the adapter would refuse to arm in every boot: refused here, before any boot
                raise RigError(where, f"{prefix}adapters.{use.name}.gates.{spec.gate}", problem,
                               f"set a number in the range, or 0 to turn {use.name} off")
        for key in resolved.full_env():
            fork = knobs.get(key)
            if fork and recipe.engine.fork != fork:
                raise RigError(
                    where, f"{'' if key in recipe.env else prefix}env.{key}", f"{key} exists only in the {fork} fork, the base image is {recipe.engine.fork or 'a stock ' + recipe.engine.name + ' release'}",
                    f"pin a {fork} base image and set engine.fork: {fork}, or drop {key}",
                )


def _draws_dummy_weights(args: list[str]) -> bool:
    return grammar.flag_value(args, ("--load-format",)) == "dummy"


def recipe_path(name_or_file: str) -> Path:
    candidate = Path(name_or_file)
    if candidate.suffix in (".yaml", ".yml"):
        return candidate
    if not grammar.is_recipe_name(name_or_file):  # a name never walks out of recipes/
        raise RigError("command line", "recipe", f"{name_or_file!r} is not a recipe name",
                       _respelled(name_or_file) or "pass a name from `rig validate` (lowercase letters, digits, -) "
                       "or a path to a .yaml file")
    return RECIPES_DIR / f"{name_or_file}.yaml"


def _respelled(text: str) -> str | None:
    """'did you mean tiny-cpu?' for a recipe's name written with capitals or underscores (tiny_cpu),
    where that spelling is a recipe of recipes/; None otherwise."""
    name = text.strip().lower().replace("_", "-")
    if grammar.is_recipe_name(name) and (RECIPES_DIR / f"{name}.yaml").is_file():
        return f"did you mean {name}? (recipe names are lowercase letters, digits and -)"
    return None


def split_ref(ref: str) -> tuple[str, str | None]:
    """'glm52-tp6:a16' -> ('glm52-tp6', 'a16'); 'glm52-tp6:' (a colon, no variant) is refused."""
    name, colon, variant = ref.partition(":")
    if colon and not variant:
        raise RigError("command line", "recipe", f"{ref!r} names no variant after its ':'",
                       f"write {name} for its default variant, or {name}:VARIANT (`rig validate {name}` lists them)")
    return name, (variant or None)


def parse_ref(ref: str) -> tuple[str, str | None]:
    """`split_ref` for a reference from the command line, both parts checked against their grammar:
    the name picks a state file and boot directories, so it never walks out of them."""
    name, variant = split_ref(ref)
    if not grammar.is_recipe_name(name) or (variant is not None and not grammar.is_recipe_name(variant)):
        raise RigError("command line", "recipe", f"{ref!r} is not a recipe name[:variant]",
                       "pass a name from `rig validate` (lowercase letters, digits, -), optionally :variant")
    return name, variant



def load(ref: str) -> Resolved:
    name, variant = split_ref(ref)
    return parse_recipe(recipe_path(name)).variant(variant)


def all_recipe_paths() -> list[Path]:
    return sorted(RECIPES_DIR.glob("*.yaml"))
