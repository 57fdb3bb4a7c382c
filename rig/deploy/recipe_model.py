"""What a recipe is: the typed schema of `recipes/<name>.yaml`, and a recipe with one variant
applied (`Resolved`), which is what a boot runs.

Every field has its real grammar (rig/grammar.py) and a bound on its fan-out, so a value that
validates here renders into a compose file or a command line as written. Reading a file into
these types, with every problem as one line (file, field, fix), is rig/deploy/recipe.py; what a
recipe may not set because rig owns it is rig/deploy/recipe_owned.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StrictBool, StrictInt, StrictStr, field_validator, model_validator

from rig import grammar
from rig.engines import ENGINES
from rig.errors import RigError
from rig.log_patterns import safe_regex
from rig.typed import Spec

Platform = Literal["linux/amd64", "linux/arm64"]
Digest = Annotated[StrictStr, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
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
SafeRegex = Annotated[StrictStr, AfterValidator(safe_regex)]
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
    # RE2 patterns: linear-time matching whatever their shape, program size bounded (rig/log_patterns.py safe_regex).
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
