"""A `make` target whose rig command fails names rig's own exit code: GNU make exits 2 whenever a
recipe fails, so the target's last line says which code rig gave and what it means (rig.exits)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rig.exits import SHORT, Exit, make_line, short

REPO = Path(__file__).resolve().parent.parent


def test_every_code_has_a_short_meaning_for_the_make_line():
    assert set(SHORT) == set(Exit)
    assert make_line(4) == "make: rig exited 4 (not usable: a measured run, or no usable boot pair); make's own exit status is 2 for any failure"
    assert short(143) == "stopped by signal 15" and short(99) == "not one of rig's codes"


def test_python_m_rig_exits_prints_the_line_the_makefile_ends_with():
    done = subprocess.run([sys.executable, "-m", "rig.exits", "7"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stderr == make_line(Exit.UNDECIDED) + "\n"
    done = subprocess.run([sys.executable, "-m", "rig.exits", "x"], capture_output=True, text=True, check=False)
    assert done.returncode == Exit.BAD_INPUT


def _make(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("make") is None:
        pytest.fail("GNU make is not installed (the Makefile is how a new user starts)")
    venv = Path(sys.executable).parent.parent  # the environment these tests run in, as `make setup` made it
    # -o: the set-up stamp is taken as up to date (a test never reinstalls the environment)
    return subprocess.run(["make", "-s", "-o", f"{venv}/.rig-setup", f"VENV={venv}", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.parametrize("target,code", [(["validate", "no-such-recipe"], Exit.FAILED),
                                         (["loadtest", "no-such-recipe"], Exit.BAD_INPUT)])
def test_a_failed_targets_last_line_is_rigs_own_exit_code(target, code):
    done = _make(*target)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done  # GNU make's own status for any failed recipe
    assert make_line(code) in lines and lines[-1].endswith(f"Error {int(code)}"), lines  # then make's own line, same code
    assert lines.index(make_line(code)) == len(lines) - 2, lines


def test_a_target_that_succeeds_prints_no_exit_line():
    done = _make("validate", "tiny-cpu")
    assert done.returncode == 0 and "rig exited" not in done.stdout + done.stderr, done
    assert done.stdout.splitlines()[0].endswith("rig validate tiny-cpu")  # the command it ran, as make would echo it
