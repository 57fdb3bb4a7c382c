"""The boot record (results/boots/<id>/boot.json, and while a boot is up its recipe's state file):
boot ids, the image a boot ran, its compile caches, read back strictly."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from rig import paths
from rig.atomic import write_text_atomic
from rig.deploy.render import COMPOSE_DIR, project_name
from rig.errors import Damaged
from rig.image import BootImage  # re-exported: rig.boot.record.BootImage is where boot code reads it
from rig.observe.fingerprint import Fingerprint
from rig.paths import REPO_ROOT
from rig.strict_yaml import read_regular
from rig.typed import Typed, Versioned, first_problem

# What a stored boot record (boot.json, a state file) may name as its driver: `rig down` stops it
# through that driver, so an unknown one is refused instead of falling back to another.
STORED_DRIVERS = frozenset({"native", "compose", "slurm"})
RECORD_MAX_BYTES = 4 << 20
LOG_MAX_BYTES = 256 << 20  # a server log; a vLLM boot writes ~1 MB  # a boot record is a few kB (its fingerprint included)
BOOT_SCHEMA = 1  # boot.json and the state files; records written before it carried no version are version 1
# <yyyymmdd>-<hhmmss>-<recipe>[.<variant>]-<4 hex>: the slug is unambiguous between fixed-width parts.
BOOT_ID = re.compile(r"[0-9]{8}-[0-9]{6}-(?P<recipe>[a-z0-9][a-z0-9-]*)(?:\.(?P<variant>[a-z0-9][a-z0-9-]*))?-[0-9a-f]{4}")


class CacheDir(Typed):
    path: str
    files: int
    bytes: int


class CacheState(Typed):
    """The engine's compile and kernel caches when a boot started (engine_env.cache_state)."""

    state: Literal["cold", "partial", "warm"] | None = None
    dirs: dict[str, CacheDir] = Field(default_factory=dict)
    log: Literal["reused", "compiled"] | None = None  # what the engine's own log says the boot did (after healthy)
    # cache -> files it gained while the boot ran, counted at stop (native driver): a boot that filled
    # a cache compiled or autotuned into it, whatever `state` said at start (a Triton cache of 1 file
    # is "warm" at start and gained 262 during the boot, whose first request took 1.3 s).
    grew: dict[str, int] = Field(default_factory=dict)


class BootRecord(Versioned):
    """One boot (results/boots/<id>/boot.json) and, while it is up, its recipe's state file. Read
    back strictly: a state file that was truncated, extended or edited is refused, not trusted, and
    one of another schema version is refused in one line."""

    schema_version: int = Field(BOOT_SCHEMA, alias="schema")

    boot_id: str
    ref: str
    recipe: str
    variant: str | None
    driver: str  # "native" or "compose" for a boot rig started; "attached" (a server rig did not start), "imported"
    base_url: str
    boot_dir: str
    log_path: str
    manifest_dir: str
    overlay: dict[str, str] = Field(default_factory=dict)
    started: float = 0.0
    healthy_after_s: float | None = None
    stopped: float | None = None
    status: Literal["booting", "healthy", "failed", "stopped", "attached"] = "booting"  # attached: a server rig did not start
    served_model: str | None = None
    pid: int | None = None
    # The kernel's identity of `pid` (rig/boot/process.py): a pid alone is reused after exit.
    pid_start_ticks: int | None = None
    kernel_boot_time: int | None = None
    compose_project: str | None = None
    compose_files: list[str] = Field(default_factory=list)
    slurm_job: str | None = None  # the Slurm job of a slurm boot (rig/boot/slurm.py)
    slurm_nodes: list[str] = Field(default_factory=list)  # its nodes, the head first
    slurm_end: str | None = None  # Slurm's state and reason where Slurm ended the job before rig stopped it
    image: BootImage = Field(default_factory=BootImage)
    # The host as this boot found it (rig.observe.fingerprint): comparisons check boots against it.
    fingerprint: Fingerprint | None = None
    # The engine's compile caches when the boot started (rig/boot/engine_env.py cache_state).
    compile_cache: CacheState = Field(default_factory=CacheState)
    error: str | None = None
    # What started it where that was not `rig up` (a comparison or a race, which stop their own boots)
    owner: str | None = None
    # Why `down` signalled nothing: the recorded pid names another process now (a stale state).
    not_signalled: str | None = None

    @field_validator("fingerprint", mode="before")
    @classmethod
    def _none_before_healthy(cls, value: Any) -> Any:
        return None if value == {} else value  # records written before fingerprints were typed said {}

    def save(self) -> None:
        write_text_atomic(Path(self.boot_dir) / "boot.json", self.model_dump_json(indent=1))

    @classmethod
    def load(cls, path: Path) -> BootRecord:
        """Read a boot record or state file; anything but a complete, well-typed record whose paths
        are its own boot directory's is one RigError line (a state file is input: edited, it could
        point `rig logs` at any file or make `rig down` write a boot record anywhere)."""
        fix = (f"check that nothing of this recipe still runs (`ps -eo pid,pgid,args`), then delete {_shown(path)}"
               if path.parent == paths.state_dir() else "this boot record is damaged; leave it out of comparisons")
        text = read_regular(path, RECORD_MAX_BYTES, _shown(path),
                            missing=("no such boot record", "list boots with `rig status` or under results/boots/"))
        try:
            record = cls.model_validate_json(text)
        except ValidationError as error:
            field, problem = first_problem(error)
            raise Damaged(_shown(path), field, f"not a complete boot record ({problem})", fix) from None
        problem = record.inconsistency()
        if problem:
            field, why = problem
            other = record.results_root_elsewhere()
            if other is not None and path.parent == paths.state_dir():  # most likely: another RIG_RESULTS_DIR, not damage
                raise Damaged(_shown(path), field, f"{record.ref} was started with its results under {other}, and rig now "
                              f"writes under {paths.results_dir()}", f"run rig with RIG_RESULTS_DIR={other} (`rig status`, "
                              f"`rig down {record.recipe}`)")
            raise Damaged(_shown(path), field, f"not a boot record rig wrote ({why})", fix)
        return record

    def inconsistency(self) -> tuple[str, str] | None:
        """(field, why) when the record's names or paths are not those rig gives a boot, else None."""
        if self.driver not in STORED_DRIVERS:
            return "driver", f"{self.driver!r} is not a driver rig has ({', '.join(sorted(STORED_DRIVERS))})"
        found = BOOT_ID.fullmatch(self.boot_id)
        if not found or found.group("recipe") != self.recipe or found.group("variant") != self.variant:
            return "boot_id", f"{self.boot_id!r} is not a boot id of {self.ref!r}"
        if self.ref != self.recipe + (f":{self.variant}" if self.variant else ""):
            return "ref", f"{self.ref!r} is not recipe {self.recipe!r} variant {self.variant!r}"
        boot_dir = paths.boots_dir() / self.boot_id
        expected = {"boot_dir": boot_dir, "log_path": boot_dir / "server.log", "manifest_dir": boot_dir / "manifests"}
        for name, path in expected.items():
            if Path(getattr(self, name)) != path:
                return name, f"{getattr(self, name)!r} is not {str(path)!r}"
        # The compose project is the one rig derives for this recipe and variant (rig.deploy.render
        # compose_project), never another: `rig down` runs `docker compose -p <it> down`.
        expected_project = project_name(self.recipe, self.variant)
        if self.driver == "compose" and self.compose_project != expected_project:
            return "compose_project", f"{self.compose_project!r} is not this boot's project ({expected_project!r})"
        if self.driver != "compose" and self.compose_project is not None:
            return "compose_project", f"a {self.driver} boot has no compose project ({self.compose_project!r})"
        for index, compose_file in enumerate(self.compose_files):
            if Path(compose_file).parent not in (boot_dir, COMPOSE_DIR):
                return f"compose_files.{index}", f"{compose_file!r} is neither a rendered file nor this boot's override"
        return None

    def results_root_elsewhere(self) -> Path | None:
        """The results directory this record's paths belong to, when they are a boot's own paths
        under another one than rig's now (a boot started with another RIG_RESULTS_DIR); else None."""
        boot_dir = Path(self.boot_dir)
        if (boot_dir.name != self.boot_id or boot_dir.parent.name != "boots" or Path(self.log_path) != boot_dir / "server.log"
                or Path(self.manifest_dir) != boot_dir / "manifests" or boot_dir.parent == paths.boots_dir()):
            return None
        return boot_dir.parent.parent

    def log_text(self) -> str:
        """The server log ("" while there is none); a log that is not a regular file inside the boot's
        own directory is refused (Damaged), never read."""
        from rig.errors import NotFound
        from rig.strict_yaml import read_inside

        try:
            return read_inside(Path(self.log_path), Path(self.boot_dir), LOG_MAX_BYTES).decode(errors="replace")
        except NotFound:
            return ""


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)
