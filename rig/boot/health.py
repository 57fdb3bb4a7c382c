"""Waiting for a booted server: its health endpoint, its served model, what its log says it
compiled, and the host fingerprint taken once it is healthy."""

from __future__ import annotations

import http.client
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from rig import client
from rig.boot.base import BootDriver, BootFailed
from rig.boot.record import BootRecord
from rig.boot.state import remember
from rig.engines import Engine
from rig.observe.fingerprint import CacheFiles, Fingerprint, host_fingerprint, manifest_hashes


def http_get_json(url: str, timeout: float = 5.0) -> Any:
    """An authenticated GET of our own server (rig/client.py)."""
    return client.get_json(url, timeout)


def wait_healthy(record: BootRecord, health_path: str, timeout_s: float, alive: Callable[[], str | None],
                 progress: bool = True, foreign: Callable[[], str | None] = lambda: None) -> None:
    """Poll the health endpoint until it answers 200; `alive` returns why the server is gone, or None;
    `foreign`, once it answers, why the answer may come from another program's server, or None."""
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
                if (other := foreign()) is not None:
                    raise BootFailed(f"{record.ref}: {url} answers, but {other}; stop that program or pass a free --port")
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


HEALTH_PROBE_S = 10.0  # a busy engine answers /health late, not never


def unhealthy(record: BootRecord, health_path: str) -> str | None:
    """Why a server that is up does not serve now (its health endpoint's answer), or None: a
    process can outlive its engine (transformers serve's batching worker died: /health 503)."""
    url = record.base_url + health_path
    try:
        status = client.get_status(url, timeout=HEALTH_PROBE_S)
    except urllib.error.HTTPError as error:
        return f"{health_path} answered {error.code}"
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as error:
        return f"{health_path} did not answer within {HEALTH_PROBE_S:g} s ({type(error).__name__})"
    except http.client.HTTPException as error:  # an answer that is not HTTP (another program on the port)
        return f"{health_path} answered something that is not HTTP ({type(error).__name__})"
    return None if status == 200 else f"{health_path} answered {status}"


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
        foreign = getattr(driver, "foreign_listener", None)  # the native driver's; a container's port is published by its engine
        wait_healthy(record, serving.health, serving.boot_timeout_s, lambda: driver.alive(record), progress,
                     (lambda: foreign(record)) if foreign is not None else (lambda: None))
    except (BootFailed, KeyboardInterrupt) as error:  # SIGTERM/SIGHUP arrive as KeyboardInterrupt (rig/cli/signals.py)
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
