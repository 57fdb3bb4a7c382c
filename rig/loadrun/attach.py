"""Attach mode: measure a server rig did not start (`rig loadtest --url URL`).

The warmup rule needs to know when the server booted, so the boot identity comes from the
server itself: a local container's id and start time (Docker SDK), else the start time of the
local process listening on the port, else the `process_start_time_seconds` the server's
Prometheus page reports, else an explicit --boot-id. The first run of each scenario against
each identity is the warmup, exactly as for boots rig makes.
"""

from __future__ import annotations

import hashlib
import math
import time
import urllib.parse
from typing import Any

from rig import paths
from rig.boot.health import http_get_json
from rig.boot.record import BootImage, BootRecord
from rig.deploy.recipe import Resolved, load
from rig.engines import ENGINES
from rig.errors import RigError


def _port(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RigError("command line", "--url", f"{url!r} is not an http(s) URL", "write --url http://127.0.0.1:PORT")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def container_identity(port: int) -> str | None:
    """`container-<id12>-<started>` of the local container publishing `port`, if a Docker engine answers."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        containers = client.containers.list()
    except Exception:  # no engine here: this identity source simply does not apply
        return None
    for container in containers:
        for bindings in (container.attrs.get("NetworkSettings", {}).get("Ports") or {}).values():
            if any(str(b.get("HostPort")) == str(port) for b in bindings or []):
                started = container.attrs.get("State", {}).get("StartedAt", "")
                return f"container-{container.id[:12]}-{started}"
    return None


def process_identity(host: str, port: int) -> str | None:
    """`process-<pid>-<start time>` of the local process listening on the port."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    import psutil

    try:
        for connection in psutil.net_connections(kind="tcp"):
            if connection.status == psutil.CONN_LISTEN and connection.laddr and connection.laddr.port == port and connection.pid:
                return f"process-{connection.pid}-{psutil.Process(connection.pid).create_time():.2f}"
    except (psutil.Error, OSError):
        return None
    return None


def metrics_identity(base_url: str) -> str | None:
    """The server's own start time from its Prometheus page (process_start_time_seconds)."""
    import requests

    from rig import client

    try:
        with client.session() as http:
            response = http.get(base_url + "/metrics", timeout=5)
    except requests.RequestException:
        return None
    if response.status_code != 200:
        return None
    for line in response.text.splitlines():
        if line.startswith("process_start_time_seconds"):
            try:
                started = float(line.split()[-1])
            except (ValueError, IndexError):
                return None  # not a Prometheus sample: the page cannot tell the boot
            return f"metrics-start-{started:.0f}" if math.isfinite(started) else None
    return None


def _first_model(models: Any) -> dict[str, Any]:
    """The first entry of an OpenAI /v1/models answer ({} when the answer has none of that shape)."""
    data = models.get("data") if isinstance(models, dict) else None
    first = data[0] if isinstance(data, list) and data else {}
    return first if isinstance(first, dict) else {}


def detect_engine(models: dict[str, Any]) -> str:
    """vLLM and SGLang name themselves in /v1/models' owned_by; anything else gets no engine-only fields."""
    owner = str(_first_model(models).get("owned_by", "")).lower()
    return owner if owner in ENGINES else "transformers"


def attach(url: str, ref: str | None, model: str | None, boot_id: str | None) -> tuple[Resolved | None, BootRecord, str]:
    """(recipe if named, a boot record standing for the server's current boot, engine name)."""
    host, port = _port(url)
    base_url = url.rstrip("/")
    try:
        models = http_get_json(base_url + "/v1/models", timeout=10)
    except (OSError, ValueError) as error:
        raise RigError("command line", "--url", f"{base_url}/v1/models did not answer ({error})",
                       "start the server, or check the URL") from None
    if not isinstance(models, dict):
        raise RigError("command line", "--url", f"{base_url}/v1/models answered {type(models).__name__}, not an OpenAI model list",
                       "point --url at an OpenAI-compatible server (vLLM, SGLang, transformers serve)")
    served = model or _first_model(models).get("id")
    if not served or not isinstance(served, str):
        raise RigError("command line", "--model", f"{base_url} lists no model", "pass --model NAME")
    resolved = load(ref) if ref else None
    engine = resolved.recipe.engine.name if resolved else detect_engine(models)
    local = host in ("127.0.0.1", "localhost", "::1")
    identity = (boot_id or (container_identity(port) if local else None) or process_identity(host, port)
                or metrics_identity(base_url))
    if identity is None:
        raise RigError("command line", "--boot-id", f"cannot tell which boot of {base_url} this is (no local container or "
                       "process on that port, no process_start_time_seconds in /metrics)",
                       "pass --boot-id ID and change it whenever the server restarts (the first run per id is the warmup)")
    digest = hashlib.sha256(f"{base_url} {identity}".encode()).hexdigest()[:12]
    name = f"attached-{port}-{digest}"
    boot_dir = paths.boots_dir() / name
    (boot_dir / "manifests").mkdir(parents=True, exist_ok=True)
    record = BootRecord(boot_id=name, ref=resolved.ref if resolved else base_url, recipe=resolved.recipe.name if resolved else "attached",
                        variant=resolved.variant if resolved else None, driver="attached", base_url=base_url,
                        boot_dir=str(boot_dir), log_path=str(boot_dir / "server.log"), manifest_dir=str(boot_dir / "manifests"),
                        started=time.time(), status="attached", served_model=served)
    record.image = BootImage(identity=identity)
    return resolved, record, engine
