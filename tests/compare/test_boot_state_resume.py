"""The boot-state control across a resume: a comparison cut on one host and resumed on a fresh one
(its compile caches empty) boots each arm's first boot there again when it compiles, so no measured
boot compiled while others reused; resumed on the same host (caches kept), nothing is booted twice.

run_boot is replaced by a host model: a boot compiles when its host's caches do not hold its arm's
configuration yet, and says so as the engine's log would (CacheState.log)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rig.boot.record import CacheState
from rig.compare import run as compare_run
from rig.compare.arms import parse_arm
from rig.compare.model import BootEntry, ComparePlan, RunResult


@dataclass
class Host:
    """A GPU host's compile caches; `cut_at`: the boot (counted on this host) its end interrupts."""

    name: str
    cut_at: int | None = None
    caches: set[str] = field(default_factory=set)
    boots: int = 0

    def boot(self, job, setup):
        index, block, arm, burn_in, redo_if_compiled = job.index, job.block, job.arm, job.burn_in, job.redo_if_compiled
        self.boots += 1
        if self.cut_at is not None and self.boots == self.cut_at:
            raise compare_run.Interrupted([])
        compiled = arm.name not in self.caches
        state = "cold" if not self.caches else "partial"
        self.caches.add(arm.name)
        result = RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": 100.0 + index}, problems=[])
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=1,
                         burn_in=burn_in or (redo_if_compiled and compiled), boot_id=f"{self.name}-{self.boots}",
                         compile_cache=CacheState(state=state, log="compiled" if compiled else "reused"),
                         rounds=[{"prose-c1": result}])


def _plan() -> ComparePlan:
    return ComparePlan(recipe="tiny-cpu", arms=[parse_arm("triton:X=0"), parse_arm("fa3:X=1")], control=None, boots=2,
                       rounds=1, scenarios=["prose-c1"], small=True)


def _run_on(host: Host, out, monkeypatch) -> list[BootEntry]:
    monkeypatch.setattr(compare_run, "run_boot", host.boot)
    monkeypatch.setattr(compare_run, "check_scoring_tokenizer", lambda *a: None)
    _, entries = compare_run.run_compare(_plan(), out, progress=False)
    return entries


def _measured(entries: list[BootEntry]) -> list[BootEntry]:
    return [entry for entry in entries if not entry.burn_in]


def test_a_resume_on_a_fresh_host_burns_in_each_arm_again(tmp_path, monkeypatch):
    # first host: triton compiles (burn-in), triton, fa3 compiles (burn-in); the host ends in its redo
    with pytest.raises(KeyboardInterrupt):
        _run_on(Host("first", cut_at=4), tmp_path, monkeypatch)
    fresh = Host("fresh")
    entries = _run_on(fresh, tmp_path, monkeypatch)
    measured = _measured(entries)
    assert [(e.index, e.arm) for e in measured] == [(0, "triton"), (1, "fa3"), (2, "fa3"), (3, "triton")]
    assert all(e.compile_cache.log == "reused" for e in measured)
    # position 1's burn-in is the fresh host's; the first host's moved aside, kept
    burn_in = BootEntry.read(BootEntry.path(tmp_path, 1, "fa3", burn_in=True))
    assert burn_in.boot_id == "fresh-1" and burn_in.compile_cache.log == "compiled"
    superseded = sorted(p.name for p in (tmp_path / "boots" / "superseded").iterdir())
    assert superseded == ["01-fa3.burn-in.first-3.json"]
    assert sum(1 for e in entries if e.burn_in) == 3  # triton on the first host, fa3 and triton on the fresh one


def test_a_resume_on_the_same_host_boots_nothing_twice(tmp_path, monkeypatch):
    host = Host("same", cut_at=4)
    with pytest.raises(KeyboardInterrupt):
        _run_on(host, tmp_path, monkeypatch)
    host.cut_at, host.boots = None, 0
    entries = _run_on(host, tmp_path, monkeypatch)
    assert host.boots == 3  # the cut boot and the last two; each reused the caches
    assert all(e.compile_cache.log == "reused" for e in _measured(entries))
    assert not (tmp_path / "boots" / "superseded").exists()
