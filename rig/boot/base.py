"""What every boot driver shares: boot ids, the boot record, state files, the health wait."""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rig.recipe import REPO_ROOT, Resolved

RESULTS_DIR = Path(os.environ.get("RIG_RESULTS_DIR", REPO_ROOT / "results"))
BOOTS_DIR = RESULTS_DIR / "boots"
STATE_DIR = Path(os.environ.get("RIG_STATE_DIR", REPO_ROOT / ".rig" / "state"))


class BootFailed(Exception):
    """A boot that did not become healthy; the server has been stopped and its log kept."""


@dataclass
class BootRecord:
    boot_id: str
    ref: str
    recipe: str
    variant: str | None
    driver: str
    base_url: str
    boot_dir: str
    log_path: str
    manifest_dir: str
    overlay: dict[str, str] = field(default_factory=dict)
    started: float = 0.0
    healthy_after_s: float | None = None
    stopped: float | None = None
    status: str = "booting"
    served_model: str | None = None
    pid: int | None = None
    compose_project: str | None = None
    compose_files: list[str] = field(default_factory=list)
    image: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def save(self) -> None:
        Path(self.boot_dir).mkdir(parents=True, exist_ok=True)
        (Path(self.boot_dir) / "boot.json").write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> BootRecord:
        return cls(**json.loads(path.read_text()))

    def log_text(self) -> str:
        path = Path(self.log_path)
        return path.read_text(errors="replace") if path.exists() else ""


def new_boot(resolved: Resolved, driver: str, overlay: dict[str, str], port: int) -> BootRecord:
    boot_id = time.strftime("%Y%m%d-%H%M%S") + f"-{resolved.slug}-{secrets.token_hex(2)}"
    boot_dir = BOOTS_DIR / boot_id
    (boot_dir / "manifests").mkdir(parents=True, exist_ok=True)
    return BootRecord(
        boot_id=boot_id, ref=resolved.ref, recipe=resolved.recipe.name, variant=resolved.variant, driver=driver,
        base_url=f"http://{_client_host(resolved.recipe.serving.bind)}:{port}", boot_dir=str(boot_dir),
        log_path=str(boot_dir / "server.log"), manifest_dir=str(boot_dir / "manifests"), overlay=dict(overlay),
        started=time.time(),
    )


def _client_host(bind: str) -> str:
    return "127.0.0.1" if bind in ("0.0.0.0", "") else bind  # noqa: S104 - mapping a wildcard bind to loopback


def state_path(recipe_name: str) -> Path:
    return STATE_DIR / f"{recipe_name}.json"


def current_boot(recipe_name: str) -> BootRecord | None:
    path = state_path(recipe_name)
    return BootRecord.load(path) if path.exists() else None


def remember(record: BootRecord) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    state_path(record.recipe).write_text(json.dumps(asdict(record), indent=1))
    record.save()


def forget(record: BootRecord) -> None:
    state_path(record.recipe).unlink(missing_ok=True)
    record.save()


def http_get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - our own server's URL
        return json.loads(response.read() or b"null")


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
            with urllib.request.urlopen(url, timeout=3) as response:  # noqa: S310
                if response.status == 200:
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


def await_healthy(driver: BootDriver, record: BootRecord, serving: Any, progress: bool) -> BootRecord:
    """Wait for health; a boot that does not get there (or is interrupted) is stopped and marked failed."""
    try:
        wait_healthy(record, serving.health, serving.boot_timeout_s, lambda: driver.alive(record), progress)
    except (BootFailed, KeyboardInterrupt) as error:
        record.status, record.error = "failed", str(error)
        driver.down(record)
        raise
    record.status = "healthy"
    record.served_model = served_model(record.base_url)
    remember(record)
    return record


class BootDriver(Protocol):
    name: str

    def up(self, resolved: Resolved, overlay: dict[str, str] | None = None, port: int | None = None,
           progress: bool = True) -> BootRecord: ...

    def down(self, record: BootRecord) -> None: ...

    def alive(self, record: BootRecord) -> str | None: ...
