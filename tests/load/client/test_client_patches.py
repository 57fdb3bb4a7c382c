"""rig's patches of Locust and urllib3 (rig.load.client.patches): each is checked against the release
it was written for and the attribute it replaces, and refuses in one line naming the patch otherwise.
The check runs on the real modules: urllib3 here (importing it changes nothing), Locust in its own
interpreter (importing Locust patches the standard library with gevent), and a real older Locust
installed beside the pinned one."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import tomllib

import pytest
import urllib3
from conftest import REPO

from rig.errors import Invalid
from rig.load.client.patches import KERNEL_POLL, LOCUST_PIN, PATCHES, SEND_TIME, WORKER_SPAWNS, PatchMismatch


def refusal(patch) -> str:
    with pytest.raises(PatchMismatch) as caught:
        patch.check()
    text = str(caught.value)
    assert "\n" not in text and text.startswith("rig/load/client/patches.py: patch ") and "; fix: " in text, text
    return text


def test_the_urllib3_patches_hold_on_the_installed_urllib3():
    SEND_TIME.check()
    KERNEL_POLL.check()


def test_another_release_is_refused_naming_the_patch_the_version_found_and_the_fix():
    text = refusal(dataclasses.replace(SEND_TIME, written_for="1.26"))
    assert f"patch send_time: written for urllib3 1.26, found urllib3 {urllib3.__version__}" in text
    assert "fix: install urllib3==1.26.*" in text
    assert isinstance(PatchMismatch("w", "f", "p", "x"), Invalid)  # a bad environment: exit 2, like bad input


def test_an_attribute_that_is_gone_is_refused():
    assert "HTTPConnection.send_request is missing in urllib3" in refusal(dataclasses.replace(SEND_TIME, attribute="send_request"))


def test_a_class_that_is_gone_is_refused():
    assert "urllib3.connection:HTTPConnexion.request is missing" in refusal(dataclasses.replace(SEND_TIME, owner="urllib3.connection:HTTPConnexion"))


def test_an_attribute_with_other_parameters_is_refused():
    text = refusal(dataclasses.replace(SEND_TIME, parameters=("self", "url", "method")))
    assert "HTTPConnection.request takes (self, method, url), not (self, url, method)" in text


def test_a_property_that_became_a_method_is_refused():
    assert "HTTPConnection.request is not a property" in refusal(dataclasses.replace(KERNEL_POLL, attribute="request"))


@pytest.mark.parametrize(("written_for", "version", "matches"), [
    ("2.47.0", "2.47.0", True), ("2.47.0", "2.47.1", False), ("2.47.0", "2.4", False),
    ("2", "2.8.0", True), ("2", "3.0.0", False), ("2", "20.1", False), ("2", "1.26.20", False)])
def test_a_release_matches_by_its_dotted_parts(written_for, version, matches):
    assert dataclasses.replace(SEND_TIME, written_for=written_for).matches(version) is matches


def test_the_locust_patches_name_the_release_pyproject_pins():
    pinned = [d for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"] if d.startswith("locust")]
    assert pinned == [f"locust=={LOCUST_PIN}"]
    assert {patch.written_for for patch in PATCHES if patch.library == "locust"} == {LOCUST_PIN}
    assert len({patch.name for patch in PATCHES}) == len(PATCHES)


SCRIPT = """
import locust  # first, as Locust's own command line does
import json, time
import urllib3.connection
from locust import User, constant, task
from locust.env import Environment
from rig.load.client import patches

patches.require_written_for()  # every row holds on the pinned Locust and the installed urllib3
written = {}
patches.stamp_send_time(written)
patches.stamp_send_time(written)  # applied twice, it still wraps urllib3's own request once
request = urllib3.connection.HTTPConnection.request
patches.poll_the_kernel()

class Idle(User):
    wait_time = constant(30)

    @task
    def nothing(self):
        pass

runner = Environment(user_classes=[Idle]).create_local_runner()
spawns = []
patches.record_local_rounds(runner, spawns)
runner.start(3, spawn_rate=100)
runner.spawning_greenlet.join()
runner.quit()
print(json.dumps({"wraps_original": request.rig_original is request.__wrapped__ and not hasattr(request.__wrapped__, "rig_original"),
                  "poll_is_property": isinstance(urllib3.connection.HTTPConnection.__dict__["is_connected"], property),
                  "users": [users for _, users in spawns], "stamped": all(abs(t - time.time()) < 60 for t, _ in spawns)}))
"""


def test_every_patch_applies_on_the_pinned_locust():
    """On the pinned Locust the checks pass, a patch applied twice wraps the original once, and the
    local runner's rounds are recorded as Locust spawns them (the users asked for so far)."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True,
                            timeout=120, check=False, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["wraps_original"] and outcome["poll_is_property"] and outcome["stamped"], outcome
    assert outcome["users"] and outcome["users"][-1] == 3 and outcome["users"] == sorted(outcome["users"]), outcome


OLDER_LOCUST = "2.32.0"


@pytest.mark.slow  # installs a Locust release from the package index
def test_the_locust_file_refuses_another_locust_in_one_line_naming_the_patch(tmp_path):
    target = tmp_path / "older"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                              f"locust=={OLDER_LOCUST}"], capture_output=True, text=True, timeout=300, check=False)
    assert install.returncode == 0, install.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO)])}
    env.pop("RIG_LOAD_CONFIG", None)
    result = subprocess.run([sys.executable, "-m", "locust", "-f", str(REPO / "loadtests" / "locustfile.py"), "--headless",
                             "-u", "1", "-t", "1s", "-H", "http://127.0.0.1:9"], capture_output=True, text=True, timeout=120,
                            env=env, cwd=tmp_path, check=False)
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-2000:])
    assert result.stderr.strip().splitlines() == [
        f"rig: rig/load/client/patches.py: patch {WORKER_SPAWNS.name}: written for locust {LOCUST_PIN}, found locust {OLDER_LOCUST}; "
        f"fix: install locust=={LOCUST_PIN} (`pip install -e .`), or re-check locust.runners:WorkerRunner.handle_message "
        f"against {OLDER_LOCUST} and update the patch"], result.stderr
