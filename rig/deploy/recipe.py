"""Recipes as data: `recipes/<name>.yaml`, validated by a typed schema.

A recipe is the only place a deployment is described. Everything else (Dockerfile, compose
file, the boot command, load-test provenance) is derived from it. `load_recipe` turns every
problem into one RigError line: file, field, fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from rig import grammar
from rig.engines import ENGINES
from rig.errors import Invalid, RigError
from rig.paths import DATA_DIR, PACKAGE_DIR, REPO_ROOT
from rig.strict_yaml import load_yaml_file
from rig.typed import Spec, misspelled

RECIPES_DIR = REPO_ROOT / "recipes"
Platform = Literal["linux/amd64", "linux/arm64"]
Digest = Annotated[StrictStr, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
RECIPE_MAX_BYTES = 256 << 10  # the largest recipe is about 3 kB
# Fan-out bounds: each variant renders a compose file, each node a service, each arg an argv entry.
MAX_VARIANTS = 32
MAX_NODES = 64
MAX_GPUS_PER_NODE = 64
MAX_PARALLEL = 4096  # tp, ep, dcp
MAX_SERVER_ARGS = 256
MAX_ENV = 256
MAX_PATTERNS = 64
# Every value that reaches a rendered file or a command line has its real grammar (rig/grammar.py);
# free text that reaches compose (args, env values) holds no `$` and never names the API key.
EnvKey = Annotated[StrictStr, AfterValidator(grammar.env_key)]
ComposeText = Annotated[StrictStr, AfterValidator(grammar.compose_literal)]
EnvMap = Annotated[dict[EnvKey, ComposeText], Field(max_length=MAX_ENV)]
ServerArgs = Annotated[list[ComposeText], Field(max_length=MAX_SERVER_ARGS)]
# Variables compose reads from the host's shell or .env file at `up`, with a default: rig renders
# ${NAME:-default} itself, so a recipe never writes a `$` (multi-node NCCL interfaces differ per host).
HostEnvMap = Annotated[dict[EnvKey, Annotated[StrictStr, AfterValidator(grammar.host_env_default)]], Field(max_length=MAX_ENV)]
VariantKey = Annotated[StrictStr, AfterValidator(grammar.variant_key)]
AbsolutePath = Annotated[StrictStr, AfterValidator(grammar.absolute_path)]
Port = Annotated[StrictInt, Field(ge=1, le=65535)]
GpuId = Annotated[StrictInt, Field(ge=0, le=1023)]
Parallel = Annotated[StrictInt, Field(ge=1, le=MAX_PARALLEL)]
SafeRegex = Annotated[StrictStr, AfterValidator(grammar.safe_regex)]
EngineName = Literal[tuple(ENGINES)]  # type: ignore[valid-type]  # one row per engine in rig/engines.py


class ModelSpec(Spec):
    id: Annotated[StrictStr, AfterValidator(grammar.model_id)] = Field(description="the model's hub id (or a local name)")
    revision: Annotated[StrictStr, AfterValidator(grammar.plain_word)] = Field(
        description="the checkpoint revision the recipe was qualified with")
    path: AbsolutePath = Field(description="where the engine reads the checkpoint (inside the container)")
    source: Literal["mount", "generated"] = Field("mount", description="generated: rig builds it (tiny-cpu, llama-h200)")
    generate: Annotated[StrictStr, AfterValidator(grammar.data_name)] | None = Field(
        None, description="source: generated: the preset in rig/data/generated_models.json rig builds")
    dims: Annotated[StrictStr, AfterValidator(grammar.data_name)] | None = Field(
        None, description="name of the model-dimension data for `rig audit`")


class EngineSpec(Spec):
    name: EngineName
    version: StrictStr = Field(description="the engine version the image carries")
    check_release: Annotated[StrictStr, AfterValidator(grammar.release_version)] | None = Field(
        None, description="the PyPI release the drift check reads when the image carries a development build"
    )
    fork: Annotated[StrictStr, AfterValidator(grammar.plain_word)] | None = Field(
        None, description="the engine fork the base image carries; None = a stock release")


class BaseImage(Spec):
    repository: Annotated[StrictStr, AfterValidator(grammar.repository)]
    tag: Annotated[StrictStr, AfterValidator(grammar.tag)]
    digests: dict[Platform, Digest] = Field(default_factory=dict, description="per-platform manifest digests")
    index_digest: Digest | None = Field(None, description="multi-platform index digest, when that is what is published")
    digest_source: StrictStr | None = Field(None, description="where the digests were read")
    pip_install: list[Annotated[StrictStr, AfterValidator(grammar.exact_pin)]] = Field(
        default_factory=list, description="packages the image adds on top of the base, each name==version")
    unpinned: StrictBool = Field(False, description="true until `rig pin` writes digests; builds then need RIG_ALLOW_UNPINNED=1")

    @field_validator("tag")
    @classmethod
    def _no_latest(cls, tag: str) -> str:
        if tag == "latest" or not tag:
            raise ValueError("a bare ':latest' tag names no fixed image; use a versioned tag and pin its digest")
        return tag

    def digest_for(self, platform: str) -> str | None:
        return self.digests.get(platform) or self.index_digest  # type: ignore[call-overload]

    def reference(self, platform: str) -> str:
        digest = self.digest_for(platform)
        return f"{self.repository}@{digest}" if digest else f"{self.repository}:{self.tag}"


class NativeSpec(Spec):
    """The Python environment a native recipe starts its engine from (bare-metal hosts, Slurm,
    systemd): an interpreter or a venv, plus PYTHONPATH entries where the engine was installed
    with `pip --target`. Nothing of rig's own environment leaks into the engine's: its PYTHONPATH
    is exactly rig's adapter overlay plus these entries."""

    python: AbsolutePath | None = Field(None, description="the interpreter that runs the engine")
    venv: AbsolutePath | None = Field(None, description="a virtual environment: its bin/python runs the engine")
    pythonpath: list[AbsolutePath] = Field(default_factory=list, max_length=64, description="PYTHONPATH entries, in order")

    @model_validator(mode="after")
    def _one_interpreter(self) -> NativeSpec:
        if self.python and self.venv:
            raise ValueError("name either python (an interpreter) or venv (a virtual environment), not both")
        if not (self.python or self.venv):
            raise ValueError("name the interpreter (python: /path/to/python3) or the venv (venv: /path/to/venv)")
        return self

    def interpreter(self) -> str:
        return self.python or f"{(self.venv or '').rstrip('/')}/bin/python"


# The drivers that start the engine as processes from rig's environment (or the recipe's native one).
PROCESS_DRIVERS = ("native", "slurm")


class SlurmSpec(Spec):
    """What a Slurm boot asks the scheduler for besides the topology (rig/boot/slurm_job.py); the
    environment's RIG_SLURM_PARTITION, RIG_SLURM_ACCOUNT and RIG_SLURM_TIME win over these."""

    partition: StrictStr | None = None
    account: StrictStr | None = None
    time: Annotated[StrictStr, Field(pattern=r"^([0-9]+-)?[0-9]+(:[0-9]{2}){0,2}$")] | None = Field(
        None, description="the job's time limit, in Slurm's form (minutes, HH:MM:SS, D-HH:MM:SS)")
    constraint: StrictStr | None = Field(None, description="node features the job needs (--constraint)")
    extra_args: list[Annotated[StrictStr, Field(pattern=r"^--[a-z][a-z-]*(=[^\s]+)?$")]] = Field(
        default_factory=list, max_length=16, description="further salloc options, each --name=value")


class Topology(Spec):
    tp: Parallel = 1
    ep: Parallel = 1
    dcp: Parallel = 1
    nodes: StrictInt = Field(1, ge=1, le=MAX_NODES)
    gpus_per_node: StrictInt = Field(0, ge=0, le=MAX_GPUS_PER_NODE)
    platform: Platform = "linux/amd64"
    gpu_ids: list[GpuId] | None = Field(None, max_length=MAX_GPUS_PER_NODE, description="pin these device ids instead of a count")

    @field_validator("gpu_ids")
    @classmethod
    def _unique_ids(cls, ids: list[int] | None) -> list[int] | None:
        if ids is not None and len(set(ids)) != len(ids):
            raise ValueError(f"gpu_ids {ids} lists a device twice")
        return ids

    @model_validator(mode="after")
    def _consistent(self) -> Topology:
        if self.gpus_per_node:
            if self.tp != self.nodes * self.gpus_per_node:
                raise ValueError(
                    f"tp ({self.tp}) must equal nodes x gpus_per_node ({self.nodes} x {self.gpus_per_node} = "
                    f"{self.nodes * self.gpus_per_node})"
                )
            if self.gpu_ids is not None and len(self.gpu_ids) != self.gpus_per_node:
                raise ValueError(f"gpu_ids lists {len(self.gpu_ids)} devices but gpus_per_node is {self.gpus_per_node}")
        if self.tp % self.dcp:
            raise ValueError(f"dcp ({self.dcp}) must divide tp ({self.tp})")
        return self


class AdapterUse(Spec):
    name: StrictStr
    gates: EnvMap = Field(description="environment the adapter reads: its gate and settings")


def _unique_adapters(uses: list[AdapterUse] | None) -> list[AdapterUse] | None:
    names = [use.name for use in uses or []]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"adapter {', '.join(duplicates)} is listed twice (its gates would silently merge)")
    return uses


class BootLog(Spec):
    # RE2 patterns: linear-time matching whatever their shape, program size bounded (rig/grammar.py safe_regex).
    must: list[SafeRegex] = Field(default_factory=list, max_length=MAX_PATTERNS, description="regexes that must appear in the boot log")
    forbid: list[SafeRegex] = Field(default_factory=list, max_length=MAX_PATTERNS, description="regexes that must not appear")


class AuditSpec(Spec):
    """Which backends (ids in rig/audit/constraints.yaml) this deployment's GEMMs are meant to run on."""

    dense: list[StrictStr] = Field(default_factory=list, description="dense linears: MLP, shared experts, attention")
    experts: list[StrictStr] = Field(default_factory=list, description="routed-expert kernels (checked on hidden and per-rank intermediate)")


class Serving(Spec):
    port: Port
    bind: Annotated[StrictStr, AfterValidator(grammar.ip_address)] = Field(
        "127.0.0.1", description="host IP address the port is published on")
    health: Annotated[StrictStr, AfterValidator(grammar.url_path)] = Field(
        "/health", description="path (on this server) the health poll requests")
    boot_timeout_s: StrictInt = Field(1200, ge=10, le=86400, description="how long a boot may take to become healthy")
    shm_size: Annotated[StrictStr, AfterValidator(grammar.docker_size)] = "32gb"
    served_model_name: Annotated[StrictStr, AfterValidator(grammar.model_id)] | None = Field(
        None, description="the model name the server answers to (rig passes the engine's flag for it)")


class Variant(Spec):
    description: StrictStr
    topology: Topology | None = None
    env: EnvMap = Field(default_factory=dict)
    host_env: HostEnvMap = Field(default_factory=dict, description="merged over the recipe's host_env")
    server_args: ServerArgs = Field(default_factory=list, description="appended to the recipe's server_args")
    adapters: Annotated[list[AdapterUse] | None, AfterValidator(_unique_adapters)] = None
    boot_log: BootLog | None = None
    audit: AuditSpec | None = None


class Recipe(Spec):
    name: Annotated[StrictStr, AfterValidator(grammar.recipe_name)]
    description: StrictStr
    model: ModelSpec
    engine: EngineSpec
    image: BaseImage | None = Field(None, description="the image compose builds and boots; a native-only recipe has none")
    topology: Topology
    serving: Serving
    driver: Literal["compose", "native", "slurm"] = "compose"
    slurm: SlurmSpec | None = Field(None, description="slurm driver: partition, account, time limit")
    native: NativeSpec | None = Field(None, description="native driver: the Python environment of the engine (default: rig's own)")
    server_args: ServerArgs = Field(default_factory=list)
    env: EnvMap = Field(default_factory=dict)
    host_env: HostEnvMap = Field(default_factory=dict, description="NAME: default, read from the host at compose up")
    adapters: Annotated[list[AdapterUse], AfterValidator(_unique_adapters)] = Field(default_factory=list)
    boot_log: BootLog = Field(default_factory=BootLog)
    audit: AuditSpec = Field(default_factory=AuditSpec)
    variants: dict[VariantKey, Variant] = Field(default_factory=dict, max_length=MAX_VARIANTS)
    default_variant: StrictStr | None = None

    @property
    def gpu(self) -> bool:
        return ENGINES[self.engine.name].gpu

    def container_image(self, action: str) -> BaseImage:
        """The image, for commands that need one (`action`: what the user asked for)."""
        if self.image is None:
            raise RigError(f"recipes/{self.name}.yaml", "image", f"this native-only recipe has no image to {action}",
                           f"boot it with `rig up {self.name}`; add image: to build and boot it as a container")
        return self.image

    def variant(self, name: str | None) -> Resolved:
        name = name or self.default_variant
        if name is None:
            return Resolved(self, None, self.topology, dict(self.env), list(self.server_args), list(self.adapters), self.boot_log,
                            self.audit)
        if name not in self.variants:
            raise RigError(
                f"recipes/{self.name}.yaml", "variants", f"no variant {name!r}",
                f"use one of {', '.join(sorted(self.variants)) or '(none)'}",
            )
        v = self.variants[name]
        adapters = v.adapters if v.adapters is not None else list(self.adapters)
        boot = BootLog(
            must=self.boot_log.must + (v.boot_log.must if v.boot_log else []),
            forbid=self.boot_log.forbid + (v.boot_log.forbid if v.boot_log else []),
        )
        return Resolved(self, name, v.topology or self.topology, {**self.env, **v.env},
                        self.server_args + v.server_args, adapters, boot, v.audit or self.audit)


class Resolved:
    """A recipe with one variant applied: what a boot actually runs."""

    def __init__(self, recipe: Recipe, variant: str | None, topology: Topology, env: dict[str, str],
                 server_args: list[str], adapters: list[AdapterUse], boot_log: BootLog, audit: AuditSpec) -> None:
        self.recipe, self.variant, self.topology = recipe, variant, topology
        self.env, self.server_args, self.adapters, self.boot_log = env, server_args, adapters, boot_log
        self.audit = audit

    @property
    def ref(self) -> str:
        return self.recipe.name + (f":{self.variant}" if self.variant else "")

    @property
    def slug(self) -> str:
        return self.recipe.name + (f".{self.variant}" if self.variant else "")

    def adapter_env(self) -> dict[str, str]:
        merged: dict[str, str] = {}
        for use in self.adapters:
            merged.update(use.gates)
        return merged

    def full_env(self) -> dict[str, str]:
        return {**self.env, **self.adapter_env()}

    def host_env(self) -> dict[str, str]:
        """NAME -> default of the variables compose reads from the host (recipe, then variant)."""
        variant = self.recipe.variants.get(self.variant) if self.variant else None
        return {**self.recipe.host_env, **(variant.host_env if variant else {})}


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
    import difflib

    close = difflib.get_close_matches(path.stem, [p.stem for p in RECIPES_DIR.glob("*.yaml")], n=3, cutoff=0.6)
    listing = (f"did you mean {' or '.join(close)}? (`rig validate` lists the recipes in {_display(RECIPES_DIR)})" if close
               else f"see `rig validate` for the recipes in {_display(RECIPES_DIR)}")
    return load_yaml_file(path, RECIPE_MAX_BYTES, where, missing=("no such recipe", listing),
                          fix="write the recipe as plain UTF-8 YAML, each key once, like recipes/*.yaml")


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


def _fork_knobs() -> dict[str, str]:
    return yaml.safe_load((DATA_DIR / "fork_knobs.yaml").read_text())


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
    known_backends = yaml.safe_load((PACKAGE_DIR / "audit" / "constraints.yaml").read_text())
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


# ---- what rig owns: flags, environment, secrets --------------------------------------------

_OWNED_FLAG_FIXES = (  # (word in the flag, where the recipe says it instead)
    ("api-key", "the API key comes from RIG_API_KEY in the environment only"),
    ("config", "write the settings as server_args (a config file would replace what rig sets)"),
    ("served-model-name", "set serving.served_model_name"),
    ("host", "set serving.bind"), ("uds", "set serving.bind"), ("port", "set serving.port (or rig up --port)"),
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
    hook = grammar.hook_variable(name, spec.allowed_env)
    if hook:
        raise RigError(where, field, f"{name} is a loader/interpreter hook: {hook}",
                       f"remove it, or allow it for {engine} in Engine.allowed_env (rig/engines.py) once it is needed")
    if not overlay and grammar.secret_looking(name):
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


def load(ref: str) -> Resolved:
    name, variant = split_ref(ref)
    return parse_recipe(recipe_path(name)).variant(variant)


def all_recipe_paths() -> list[Path]:
    return sorted(RECIPES_DIR.glob("*.yaml"))
