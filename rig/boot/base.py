"""What every boot driver shares: boot ids, the boot record, state files, the health wait."""

from __future__ import annotations

import os
import re
import secrets
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import Field, ValidationError, field_validator

from rig import client, grammar, paths
from rig.atomic import write_text_atomic
from rig.deploy.recipe import Resolved, check_overlay
from rig.deploy.render import COMPOSE_DIR
from rig.engines import Engine
from rig.errors import Damaged, RigError
from rig.observe.fingerprint import CacheFiles, Fingerprint, host_fingerprint, manifest_hashes
from rig.paths import REPO_ROOT
from rig.redaction import redact_for
from rig.strict_yaml import read_regular
from rig.typed import Typed, Versioned, first_problem

RECORD_MAX_BYTES = 4 << 20  # a boot record is a few kB (its fingerprint included)
BOOT_SCHEMA = 1  # boot.json and the state files; records written before it carried no version are version 1
# <yyyymmdd>-<hhmmss>-<recipe>[.<variant>]-<4 hex>: the slug is unambiguous between fixed-width parts.
BOOT_ID = re.compile(r"[0-9]{8}-[0-9]{6}-(?P<recipe>[a-z0-9][a-z0-9-]*)(?:\.(?P<variant>[a-z0-9][a-z0-9-]*))?-[0-9a-f]{4}")


class BootFailed(Exception):
    """A boot that did not become healthy; the server has been stopped and its log kept."""


class BootImage(Typed):
    """The image a boot ran: the container's (compose), the recipe's base (native), or the identity
    rig read from a server it did not start (attach)."""

    id: str | None = None
    tags: list[str] | None = None
    digests: list[str] | None = None
    labels: dict[str, str] | None = None
    base: str | None = None
    identity: str | None = None


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
    driver: str
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
    image: BootImage = Field(default_factory=BootImage)
    # The host as this boot found it (rig.observe.fingerprint): comparisons check boots against it.
    fingerprint: Fingerprint | None = None
    # The engine's compile caches when the boot started (rig/boot/engine_env.py cache_state).
    compile_cache: CacheState = Field(default_factory=CacheState)
    error: str | None = None
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
            raise Damaged(_shown(path), field, f"not a boot record rig wrote ({why})", fix)
        return record

    def inconsistency(self) -> tuple[str, str] | None:
        """(field, why) when the record's names or paths are not those rig gives a boot, else None."""
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
        if self.compose_project is not None and not re.fullmatch(r"rig-[a-z0-9][a-z0-9-]*(?:_[a-z0-9][a-z0-9-]*)?", self.compose_project):
            return "compose_project", f"{self.compose_project!r} is not a project rig names"
        for index, compose_file in enumerate(self.compose_files):
            if Path(compose_file).parent not in (boot_dir, COMPOSE_DIR):
                return f"compose_files.{index}", f"{compose_file!r} is neither a rendered file nor this boot's override"
        return None

    def log_text(self) -> str:
        path = Path(self.log_path)
        return path.read_text(errors="replace") if path.exists() else ""


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def new_boot(resolved: Resolved, driver: str, overlay: dict[str, str], port: int) -> BootRecord:
    """A new boot record; refused while the recipe's recorded server is still up. The overlay is
    checked like a variant's env (no rig-owned name, no loader hook) and recorded redacted
    (rig/redaction.py): the driver hands the real values to the server."""
    check_overlay(resolved, overlay, "command line", "--env")
    refuse_if_up(resolved.recipe.name)
    boot_id = time.strftime("%Y%m%d-%H%M%S") + f"-{resolved.slug}-{secrets.token_hex(2)}"
    boot_dir = paths.boots_dir() / boot_id
    (boot_dir / "manifests").mkdir(parents=True, exist_ok=True)
    record = BootRecord(
        boot_id=boot_id, ref=resolved.ref, recipe=resolved.recipe.name, variant=resolved.variant, driver=driver,
        base_url=f"http://{_client_host(resolved.recipe.serving.bind)}:{port}", boot_dir=str(boot_dir),
        log_path=str(boot_dir / "server.log"), manifest_dir=str(boot_dir / "manifests"),
        overlay=redact_for(resolved, overlay), started=time.time(),
    )
    claim(record)
    return record


# A claim without a server (its `rig up` is still preparing: the model, the adapter overlay) counts
# as starting for this long; older, its `rig up` died before starting anything and the claim is stale.
CLAIM_STALE_S = 600.0


def claim(record: BootRecord) -> None:
    """Create the recipe's state file, or refuse: two `rig up` of one recipe started at the same
    moment both pass the liveness check, and the later one's cleanup would otherwise delete the
    earlier one's state and orphan its server. Written whole, then linked in place (link refuses an
    existing name), so readers never see half a record and exactly one claim wins."""
    path = state_path(record.recipe)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{record.boot_id}")
    staging.write_text(record.model_dump_json(indent=1))
    try:
        os.link(staging, path)
    except FileExistsError:
        raise RigError(f"recipes/{record.recipe}.yaml", "(boot)", "another `rig up` of this recipe is starting or up",
                       f"wait for it (`rig status`), or stop it with `rig down {record.recipe}`") from None
    finally:
        staging.unlink(missing_ok=True)


def refuse_if_up(recipe_name: str) -> None:
    """`rig up` while the recorded server of this recipe is alive would orphan it: refuse. A state
    file whose server is gone (or whose pid now names another process) is reported and removed."""
    record = current_boot(recipe_name)
    if record is None:
        return
    if record.status == "booting" and record.pid is None and record.compose_project is None \
            and time.time() - record.started < CLAIM_STALE_S:
        raise RigError(f"recipes/{recipe_name}.yaml", "(boot)", f"boot {record.boot_id} of this recipe is starting "
                       "(another `rig up` claimed it moments ago)", "wait for it (`rig status`) or stop it with "
                       f"`rig down {recipe_name}`")
    gone = driver_named(record.driver).alive(record)
    if gone is None:
        raise RigError(f"recipes/{recipe_name}.yaml", "(boot)", f"boot {record.boot_id} of this recipe is still up at {record.base_url}",
                       f"stop it first with `rig down {recipe_name}`")
    print(f"rig: removing the stale state of boot {record.boot_id} ({gone})", file=sys.stderr)
    state_path(recipe_name).unlink(missing_ok=True)


def _client_host(bind: str) -> str:
    if bind in ("0.0.0.0", "::", ""):  # noqa: S104 - mapping a wildcard bind to loopback
        return "127.0.0.1"
    return f"[{bind}]" if ":" in bind else bind


def state_path(recipe_name: str) -> Path:
    """A recipe's state file; the name is checked here, so no caller can walk out of the state directory."""
    if not grammar.is_recipe_name(recipe_name):
        raise RigError("command line", "recipe", f"{recipe_name!r} is not a recipe name",
                       "pass a name from `rig validate` (lowercase letters, digits, -)")
    return paths.state_dir() / f"{recipe_name}.json"


def boots_of(recipe_name: str) -> list[Path]:
    """The boot.json of every boot of `recipe_name` (any variant), oldest first; `a` never matches
    the boots of `a-b`."""
    state_path(recipe_name)  # the name's grammar
    found = []
    for path in paths.boots_dir().glob("*/boot.json"):
        match = BOOT_ID.fullmatch(path.parent.name)
        if match and match.group("recipe") == recipe_name:
            found.append(path)
    return sorted(found, key=lambda path: path.parent.name)


def current_boot(recipe_name: str) -> BootRecord | None:
    path = state_path(recipe_name)
    return BootRecord.load(path) if path.exists() else None


def remember(record: BootRecord) -> None:
    write_text_atomic(state_path(record.recipe), record.model_dump_json(indent=1))
    record.save()


def forget(record: BootRecord) -> None:
    """Release the recipe's state, only if it is still this boot's (another boot may hold it now)."""
    path = state_path(record.recipe)
    try:
        import json

        current = json.loads(path.read_text()).get("boot_id")
    except (OSError, ValueError, AttributeError):
        current = None
    if current == record.boot_id:
        path.unlink(missing_ok=True)
    record.save()


def http_get_json(url: str, timeout: float = 5.0) -> Any:
    """An authenticated GET of our own server (rig/client.py)."""
    return client.get_json(url, timeout)


def wait_healthy(record: BootRecord, health_path: str, timeout_s: float, alive: Callable[[], str | None],
                 progress: bool = True) -> None:
    """Poll the health endpoint until it answers 200; `alive` returns why the server is gone, or None."""
    url = record.base_url + health_path
    deadline = time.monotonic() + timeout_s
    start = time.monotonic()
    last_print = 0.0
    while True:
        gone = alive()
        if gone:
            raise BootFailed(f"{record.ref}: the server stopped before it was healthy ({gone}); log: {record.log_path}")
        try:
            if client.get_status(url, timeout=3) == 200:
                record.healthy_after_s = round(time.time() - record.started, 3)
                if progress:
                    print(f"{chr(13) if sys.stderr.isatty() else ''}{record.ref}: healthy after {record.healthy_after_s:.1f}s ({record.base_url})   ", file=sys.stderr)
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        now = time.monotonic()
        if now > deadline:
            raise BootFailed(f"{record.ref}: not healthy after {timeout_s:.0f}s at {url}; log: {record.log_path}")
        interactive = sys.stderr.isatty()
        if progress and now - last_print >= (1.0 if interactive else 10.0):
            last_print = now
            line = f"{record.ref}: booting {now - start:5.0f}s / {timeout_s:.0f}s  {_last_line(record.log_path)[:70]:70}"
            print(f"\r{line}" if interactive else line.rstrip(), end="" if interactive else "\n", file=sys.stderr)
        time.sleep(0.25)


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 400))
            lines = handle.read().decode(errors="replace").strip().splitlines()
            return lines[-1].strip() if lines else ""
    except OSError:
        return ""


def served_model(base_url: str) -> str | None:
    try:
        data = http_get_json(base_url + "/v1/models")
        return data["data"][0]["id"] if data.get("data") else None
    except (OSError, ValueError, KeyError):
        return None


def compile_log_state(engine: Engine, log_text: str) -> str | None:
    """What the boot did, by the engine's own log: "reused" (every compilation came from its cache),
    "compiled" (something was compiled), or None when the engine logs neither (eager mode)."""
    import re

    if engine.compile_log is None:
        return None
    hit, miss = (re.compile(pattern) for pattern in engine.compile_log)
    if miss.search(log_text):
        return "compiled"
    return "reused" if hit.search(log_text) else None


def await_healthy(driver: BootDriver, record: BootRecord, serving: Any, progress: bool,
                  engine_name: str | None = None) -> BootRecord:
    """Wait for health; a boot that does not get there (or is interrupted) is stopped and marked failed.
    Once healthy, the engine's own log says whether it reused or compiled (`engine_name` given)."""
    try:
        wait_healthy(record, serving.health, serving.boot_timeout_s, lambda: driver.alive(record), progress)
    except (BootFailed, KeyboardInterrupt) as error:  # SIGTERM/SIGHUP arrive as KeyboardInterrupt (rig/cli.py)
        record.status, record.error = "failed", str(error) or type(error).__name__
        driver.down(record)
        raise
    record.status = "healthy"
    record.served_model = served_model(record.base_url)
    if engine_name is not None and record.compile_cache.state is not None:
        from rig.engines import ENGINES

        record.compile_cache.log = compile_log_state(ENGINES[engine_name], record.log_text())
    record.fingerprint = boot_fingerprint(record)
    remember(record)
    return record


def boot_fingerprint(record: BootRecord) -> Fingerprint:
    """Driver, GPUs, power limits, clocks policy, PCIe, NUMA, NCCL environment, the image that runs
    and the adapter manifests' hashes, taken once the boot is healthy."""
    cache = record.compile_cache
    return host_fingerprint(image_id=record.image.id, image_digests=record.image.digests,
                            adapter_manifests=manifest_hashes(record.manifest_dir),
                            compile_cache=CacheFiles(state=cache.state, log=cache.log,
                                                     files={name: d.files for name, d in cache.dirs.items()}))


class BootDriver(Protocol):
    name: str

    def up(self, resolved: Resolved, overlay: dict[str, str] | None = None, port: int | None = None,
           progress: bool = True, cold_caches: bool = False) -> BootRecord: ...

    def down(self, record: BootRecord) -> None: ...

    def alive(self, record: BootRecord) -> str | None: ...


# Every driver, by the name a boot record keeps: rig.boot.compose and rig.boot.native register
# theirs as they load (the rig.boot package loads both), so code here can stop a boot recorded
# by either without importing the drivers that import it.
DRIVERS: dict[str, Callable[[], BootDriver]] = {}
DEFAULT_DRIVER = "compose"


def driver_named(name: str) -> BootDriver:
    return DRIVERS.get(name, DRIVERS[DEFAULT_DRIVER])()
