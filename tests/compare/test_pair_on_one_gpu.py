"""A boot pair holds one GPU: a comparison resumed mid-pair on a host with another GPU sets the
pair's earlier boot aside (boots/superseded/) and boots it again there, so no paired difference
holds two GPUs' difference in speed. run_boot is replaced by a host model whose boots name their
GPU in the fingerprint, as a real boot's NVML reading does."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rig.compare import run as compare_run
from rig.compare.arms import parse_arm
from rig.compare.model import BootEntry, ComparePlan, RunResult
from rig.compare.schedule import BootScheduler, Done, FinishedBoot
from rig.observe.fingerprint import Fingerprint, GpuFacts


@dataclass
class Host:
    """One GPU (`uuid`, None: a host whose fingerprint names no GPU); `cut_at`: the boot counted on
    this host that its end interrupts."""

    uuid: str | None
    cut_at: int | None = None
    boots: int = 0

    def boot(self, job, setup):
        self.boots += 1
        if self.cut_at is not None and self.boots == self.cut_at:
            raise compare_run.Interrupted([])
        fingerprint = Fingerprint(taken_at=0.0, hostname="h", kernel="k", os="o", cpu="c", cpu_count=2, environment={},
                                  gpus=[GpuFacts(index=0, uuid=self.uuid)] if self.uuid else [])
        result = RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": 100.0}, problems=[])
        return BootEntry(index=job.index, block=job.block, arm=job.arm.name, spec=job.arm.spec, control=job.arm.name == "c",
                         attempt=1, burn_in=job.burn_in, boot_id=f"{self.uuid}-{self.boots}", fingerprint=fingerprint,
                         rounds=[{"prose-c1": result}])


def _plan(control: bool = False) -> ComparePlan:
    return ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")],
                       control=parse_arm("c:X=2") if control else None, boots=2, rounds=1, scenarios=["prose-c1"],
                       small=True, boot_state_control=False)


def _run_on(host: Host, out, monkeypatch, plan: ComparePlan) -> list[BootEntry]:
    monkeypatch.setattr(compare_run, "run_boot", host.boot)
    monkeypatch.setattr(compare_run, "check_scoring_tokenizer", lambda *a: None)
    return compare_run.run_compare(plan, out, progress=False)[1]


def _pairs(entries: list[BootEntry]) -> dict[int, set[str]]:
    pairs: dict[int, set[str]] = {}
    for entry in entries:
        if entry.measured:
            pairs.setdefault(entry.block, set()).add(entry.gpus)
    return pairs


def test_a_pair_cut_on_one_gpu_is_booted_again_on_the_next(tmp_path, monkeypatch):
    with pytest.raises(KeyboardInterrupt):  # pair 0's first boot on GPU-1, then the host ends in its second
        _run_on(Host("GPU-1", cut_at=2), tmp_path, monkeypatch, _plan())
    second = Host("GPU-2")
    entries = _run_on(second, tmp_path, monkeypatch, _plan())
    assert _pairs(entries) == {0: {"GPU-2"}, 1: {"GPU-2"}}
    assert second.boots == 4  # the cut boot, pair 0's first boot again, and pair 1's two
    assert sorted(p.name for p in (tmp_path / "boots" / "superseded").iterdir()) == ["00-a.GPU-1-1.json"]


def test_whole_pairs_stay_where_they_ran(tmp_path, monkeypatch):
    with pytest.raises(KeyboardInterrupt):  # pair 0 whole on GPU-1; the host ends in pair 1's first boot
        _run_on(Host("GPU-1", cut_at=3), tmp_path, monkeypatch, _plan())
    entries = _run_on(Host("GPU-2"), tmp_path, monkeypatch, _plan())
    assert _pairs(entries) == {0: {"GPU-1"}, 1: {"GPU-2"}}
    assert not (tmp_path / "boots" / "superseded").exists()


def test_the_control_and_boots_without_a_gpu_are_never_set_aside(tmp_path, monkeypatch):
    with pytest.raises(KeyboardInterrupt):  # pair 0 on GPU-1; the control (after pair 0) is cut
        _run_on(Host("GPU-1", cut_at=3), tmp_path, monkeypatch, _plan(control=True))
    entries = _run_on(Host("GPU-2"), tmp_path, monkeypatch, _plan(control=True))
    assert _pairs(entries) == {0: {"GPU-1"}, 1: {"GPU-2"}}
    with pytest.raises(KeyboardInterrupt):
        _run_on(Host(None, cut_at=2), tmp_path / "nogpu", monkeypatch, _plan())
    entries = _run_on(Host("GPU-2"), tmp_path / "nogpu", monkeypatch, _plan())
    assert _pairs(entries) == {0: {"", "GPU-2"}, 1: {"GPU-2"}}


def test_a_split_pair_read_back_keeps_its_latest_boot():
    # written by a process that stopped between filing pair 0's second boot and setting its first aside
    disk = [FinishedBoot(0, "a", False, gpus="GPU-1"), FinishedBoot(1, "b", False, gpus="GPU-2")]
    scheduler = BootScheduler(_plan(), disk)
    assert [(b.index, b.gpus) for b in scheduler.set_aside] == [(0, "GPU-1")]
    job = scheduler.next()
    assert (job.index, job.arm.name) == (0, "a")


def test_boots_that_move_between_gpus_within_one_process_still_finish():
    # a driver that places each boot anew, on one of two nodes in turn: booting again would move again
    scheduler, boots = BootScheduler(_plan()), 0
    while not isinstance(step := scheduler.next(), Done):
        scheduler.done(FinishedBoot(step.index, step.arm.name, False, gpus=f"GPU-n{boots % 2}"))
        assert scheduler.set_aside == []
        boots += 1
    assert boots == 4


def test_a_gpu_set_with_an_unread_uuid_is_unknown_and_a_multi_node_boot_counts_every_node():
    def entry(*nodes: list[str | None]) -> BootEntry:
        head, *rest = [Fingerprint(taken_at=0.0, hostname="h", kernel="k", os="o", cpu="c", cpu_count=2, environment={},
                                   gpus=[GpuFacts(index=i, uuid=u) for i, u in enumerate(uuids)]) for uuids in nodes]
        head.nodes = rest
        return BootEntry(index=0, block=0, arm="a", spec="a:X=0", control=False, attempt=1, fingerprint=head)

    assert entry(["GPU-1", None]).gpus == ""
    assert entry(["GPU-1", "GPU-2"], ["GPU-3"]).gpus == "GPU-1,GPU-2,GPU-3"
    assert entry(["GPU-1"], ["GPU-3"]).gpus != entry(["GPU-1"], ["GPU-4"]).gpus
