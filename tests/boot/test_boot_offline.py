"""Servers rig starts check for no update and reach no network (rig.engines.NO_NETWORK_ENV): a check
that runs in one boot and not the next writes under the home directory and prints a line in one boot
log only, a false difference between the arms of a comparison."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import free_port

from rig.boot.native import NativeDriver
from rig.boot.record import BootRecord
from rig.deploy.recipe import load
from rig.deploy.render import render_compose
from rig.engines import NO_NETWORK_ENV


def _record(tmp_path: Path) -> BootRecord:
    return BootRecord(boot_id="b", ref="tiny-cpu", recipe="tiny-cpu", variant=None, driver="native", base_url="http://127.0.0.1:9",
                      boot_dir=str(tmp_path), log_path="", manifest_dir=str(tmp_path / "m"), served_model="m")


def test_every_native_server_starts_offline_whatever_rigs_own_environment_says(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # rig's shell may be online; the server it starts is not
    monkeypatch.delenv("HF_HUB_DISABLE_UPDATE_CHECK", raising=False)
    env, _ = NativeDriver().environment(load("tiny-cpu"), {}, _record(tmp_path), False)
    assert {key: env[key] for key in NO_NETWORK_ENV} == NO_NETWORK_ENV
    assert env["HF_HUB_DISABLE_UPDATE_CHECK"] == "1"  # the one variable huggingface_hub's update check reads


def test_an_explicit_setting_in_an_arm_wins_over_the_default(tmp_path):
    env, _ = NativeDriver().environment(load("tiny-cpu"), {"HF_HUB_OFFLINE": "0"}, _record(tmp_path), False)
    assert env["HF_HUB_OFFLINE"] == "0" and env["HF_HUB_DISABLE_UPDATE_CHECK"] == "1"


@pytest.mark.parametrize("ref", ["tiny-cpu", "tiny-cpu-docker", "mia-tp4"])
def test_every_rendered_container_starts_offline(ref):
    import yaml

    rendered = yaml.safe_load(render_compose(load(ref)))
    for service in rendered["services"].values():
        assert {key: service["environment"][key] for key in NO_NETWORK_ENV} == NO_NETWORK_ENV


@pytest.mark.e2e
def test_a_tiny_cpu_boot_with_a_fresh_home_writes_nothing_there(tmp_path, monkeypatch, results_dir):
    """`transformers serve` runs huggingface_hub's update check at start: it touches
    $HF_HOME/.check_for_update_done (under the home directory by default) and asks PyPI for a newer
    release. A boot from a fresh home leaves that home as it found it."""
    from rig.boot import driver_for

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RIG_CACHE_DIR", str(tmp_path / "cache"))  # rig's own cache (the generated model) lies elsewhere
    for name in ("HF_HOME", "XDG_CACHE_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_UPDATE_CHECK"):
        monkeypatch.delenv(name, raising=False)
    resolved = load("tiny-cpu")
    driver = driver_for(resolved)
    record = driver.up(resolved, port=free_port(), progress=False)
    try:
        assert record.status == "healthy"
    finally:
        driver.down(record)
    written = sorted(str(Path(root, name).relative_to(home)) for root, _, names in os.walk(home) for name in names)
    assert not (home / ".cache" / "huggingface" / ".check_for_update_done").exists(), written
    assert "A new version of" not in record.log_text()
    assert written == [], written
