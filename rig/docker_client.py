"""The Docker SDK client every Docker-side step uses (build, rehearse, the compose boot driver,
the drift check inside an image): one connection rule and one line when no engine answers."""

from __future__ import annotations

from typing import Any

from rig.errors import RigError


def docker_client() -> Any:
    """The Docker SDK client, or one clear line when no engine answers."""
    import docker

    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as error:  # docker raises several unrelated types for "no engine"
        raise RigError("docker", "engine", f"no Docker engine is reachable ({type(error).__name__})",
                       "run this on a machine with a Docker engine; tiny-cpu runs natively without one") from None
    return client
