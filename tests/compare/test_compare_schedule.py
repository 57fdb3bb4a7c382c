"""The boot order as a state machine (rig.compare.schedule.BootScheduler), driven with no boot: a host
model says whether each boot compiles (its caches do not hold the arm yet) as an engine's log would,
and the scheduler alone decides what is booted, redone, filed as a burn-in, superseded or added."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rig.compare.arms import parse_arm
from rig.compare.model import ComparePlan
from rig.compare.schedule import (
    BootJob,
    BootScheduler,
    Done,
    Extended,
    Filing,
    FinishedBoot,
    LookDue,
    PairsDue,
)


@dataclass
class Host:
    """A GPU host's compile caches. `persist`: a boot's compile is kept for the next boot of its arm;
    `voids`: the positions whose boot is voided (a failed check)."""

    caches: set[str] = field(default_factory=set)
    persist: bool = True
    voids: frozenset[int] = frozenset()

    def boot(self, job: BootJob) -> FinishedBoot:
        compiled = job.arm.name not in self.caches
        if self.persist:
            self.caches.add(job.arm.name)
        return FinishedBoot(job.index, job.arm.name, compiled, voided=job.index in self.voids,
                            burn_in=job.burn_in or (job.redo_if_compiled and compiled))


@dataclass
class Run:
    """What one process did: a line per boot (`0a burn-in`, `1b`, ... `+` when it compiled), and the
    finished boots its directory holds afterwards (a superseded burn-in moved aside)."""

    trace: list[str] = field(default_factory=list)
    disk: list[FinishedBoot] = field(default_factory=list)
    jobs: list[BootJob] = field(default_factory=list)


def _plan(boots: int = 2, control: bool = False, **design: object) -> ComparePlan:
    return ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")],
                       control=parse_arm("c:X=2") if control else None, boots=boots, rounds=1, scenarios=["prose-c1"],
                       small=True, **design)


def drive(scheduler: BootScheduler, host: Host, disk: list[FinishedBoot] = (), cut_after: int | None = None,
          decisions: tuple[bool, ...] = (), pairs: int | None = None) -> Run:
    """Runs the scheduler's jobs on `host` until Done, or until `cut_after` boots finished (the next
    is cut: nothing of it is written)."""
    run = Run(disk=list(disk))
    looks = iter(decisions)
    while not isinstance(step := scheduler.next(), Done):
        if isinstance(step, LookDue):
            scheduler.looked(next(looks))
        elif isinstance(step, PairsDue):
            assert pairs is not None
            scheduler.planned(pairs)
        elif isinstance(step, Extended):
            run.trace.append(f"pairs {step.boots}")
        else:
            if cut_after is not None and len(run.jobs) == cut_after:
                return run
            run.jobs.append(step)
            boot = host.boot(step)
            filing = scheduler.done(boot)
            if filing is Filing.BURN_IN and step.supersedes:
                run.disk = [d for d in run.disk if not (d.index == step.index and d.burn_in)]
            run.disk.append(FinishedBoot(boot.index, boot.arm, boot.compiled, boot.voided,
                                         burn_in=filing is Filing.BURN_IN or step.burn_in))
            run.trace.append(f"{step.index}{step.arm.name}{'+' if boot.compiled else ''}"
                             + (" burn-in" if filing is Filing.BURN_IN or step.burn_in else ""))
    return run


@pytest.mark.parametrize(("host", "design", "trace"), [
    # a fresh host: each arm's first boot compiles, is kept as a burn-in, and is booted again
    (Host(), {}, ["0a+ burn-in", "0a", "1b+ burn-in", "1b", "2b", "3a"]),
    # warm caches: nothing compiles, nothing is redone
    (Host({"a", "b"}), {}, ["0a", "1b", "2b", "3a"]),
    # caches that do not persist: the redo compiles again, so no later boot is redone
    (Host(persist=False), {}, ["0a+ burn-in", "0a+", "1b+", "2b+", "3a+"]),
    # --no-burn-in and --cold-caches: every boot is measured as it comes
    (Host(), {"boot_state_control": False}, ["0a+", "1b+", "2b", "3a"]),
    (Host(), {"cold_caches": True}, ["0a+", "1b+", "2b", "3a"]),
    # an engine whose log cannot say: a planned burn-in of the baseline opens the order
    (Host(), {"burn_in_first": True}, ["0a+ burn-in", "1a", "2b+ burn-in", "2b", "3b", "4a"]),
    # a boot that compiled but was voided is the position's boot (nothing healthy to burn in)
    (Host(voids=frozenset({0})), {}, ["0a+", "1b+ burn-in", "1b", "2b", "3a"]),
])
def test_a_fresh_comparison_boots_in_this_order(host, design, trace):
    assert drive(BootScheduler(_plan(**design)), host).trace == trace


def test_a_control_that_compiled_is_kept_not_booted_again():
    run = drive(BootScheduler(_plan(control=True)), Host({"a", "b"}))
    assert run.trace == ["0a", "1b", "2c+", "3b", "4a"]
    control = next(job for job in run.jobs if job.arm.name == "c")
    assert not control.redo_if_compiled and control.block == 0


def test_the_time_left_counts_the_arms_that_may_still_compile_and_the_planned_pairs():
    run = drive(BootScheduler(_plan(target_pct=1.0, first_stage=2, max_boots=4, planned_pairs=3)), Host())
    first = run.jobs[0]
    assert (first.boots_in_order, first.boots_left, first.arms_may_compile) == (4, 4 + 2, 2)
    after_a = next(job for job in run.jobs if job.index == 1 and not job.again)
    assert after_a.arms_may_compile == 1  # a is booted: only b may still compile
    assert run.jobs[-1].arms_may_compile == 0 and run.jobs[-1].boots_left == 1


def test_the_time_left_names_the_boots_a_stopping_rule_may_still_add():
    from rig.compare.sequential import UntilDecided

    run = drive(BootScheduler(_plan(boots=3), until=UntilDecided(first=3, most=8)), Host(), decisions=(True,))
    first = next(job for job in run.jobs if not job.again)
    assert first.boots_rule_may_add == (8 - 3) * 2


def _fresh_jobs(host_factory) -> int:
    return len(drive(BootScheduler(_plan()), host_factory()).jobs)


@pytest.mark.parametrize("cut_after", range(_fresh_jobs(Host)))
def test_a_resume_on_the_same_host_redoes_only_the_cut_boot(cut_after):
    host = Host()
    first = drive(BootScheduler(_plan()), host, cut_after=cut_after)
    second = drive(BootScheduler(_plan(), list(first.disk)), host, disk=first.disk)
    fresh = drive(BootScheduler(_plan()), Host())
    assert first.trace + second.trace == fresh.trace  # the cut boot is booted once more, nothing else
    assert sorted(map(str, second.disk)) == sorted(map(str, fresh.disk))


@pytest.mark.parametrize("cut_after", range(_fresh_jobs(Host)))
def test_a_resume_on_a_fresh_host_measures_no_boot_that_compiled(cut_after):
    first = drive(BootScheduler(_plan()), Host(), cut_after=cut_after)
    second = drive(BootScheduler(_plan(), list(first.disk)), Host(), disk=first.disk)
    measured = [boot for boot in second.disk if not boot.burn_in]
    assert [(boot.index, boot.arm) for boot in measured] == [(0, "a"), (1, "b"), (2, "b"), (3, "a")]
    resumed = {boot.index for boot in second.disk if not boot.burn_in} - {b.index for b in first.disk if not b.burn_in}
    assert not any(boot.compiled for boot in measured if boot.index in resumed)
    # each position holds at most one burn-in: a superseded one left the directory
    burn_ins = [boot.index for boot in second.disk if boot.burn_in]
    assert len(burn_ins) == len(set(burn_ins))


def test_a_burn_in_read_back_is_superseded_when_its_boot_compiles_again_on_a_fresh_host():
    plan = _plan()
    disk = [FinishedBoot(0, "a", True, burn_in=True)]  # cut in the redo of position 0
    scheduler = BootScheduler(plan, disk)
    job = scheduler.next()
    assert isinstance(job, BootJob) and (job.index, job.redo_if_compiled, job.supersedes) == (0, True, True)
    assert scheduler.done(FinishedBoot(0, "a", True, burn_in=True)) is Filing.BURN_IN
    again = scheduler.next()
    assert isinstance(again, BootJob) and again.again and not again.redo_if_compiled and not again.supersedes
    assert scheduler.done(FinishedBoot(0, "a", False)) is Filing.ENTRY
    assert not scheduler.keeps_compiling


def test_a_burn_in_read_back_on_the_same_host_is_kept_when_the_boot_reuses_the_caches():
    scheduler = BootScheduler(_plan(), [FinishedBoot(0, "a", True, burn_in=True)])
    job = scheduler.next()
    assert isinstance(job, BootJob) and job.supersedes
    assert scheduler.done(FinishedBoot(0, "a", False)) is Filing.ENTRY
    assert isinstance(scheduler.next(), BootJob) and scheduler.next().index == 1


def test_a_boot_read_back_that_compiled_after_its_burn_in_stops_every_later_redo():
    disk = [FinishedBoot(0, "a", True, burn_in=True), FinishedBoot(0, "a", True)]
    scheduler = BootScheduler(_plan(), disk)
    job = scheduler.next()
    assert isinstance(job, BootJob) and job.index == 1 and not job.redo_if_compiled and job.arms_may_compile == 0
    assert scheduler.keeps_compiling


def test_an_arm_booted_in_this_process_is_not_redone_where_its_position_holds_a_burn_in():
    # position 3 (a) was cut in its redo on the first host; this process booted a at position 0 already
    disk = [FinishedBoot(1, "b", False), FinishedBoot(2, "b", False), FinishedBoot(3, "a", True, burn_in=True)]
    run = drive(BootScheduler(_plan(), disk), Host(), disk=disk)
    assert run.trace == ["0a+ burn-in", "0a", "3a"]
    assert not run.jobs[-1].redo_if_compiled and not run.jobs[-1].supersedes


def test_target_adds_the_pairs_its_first_stage_planned():
    plan = _plan(target_pct=1.0, first_stage=2, max_boots=4)
    run = drive(BootScheduler(plan), Host({"a", "b"}), pairs=4)
    assert run.trace == ["0a", "1b", "2b", "3a", "pairs 3", "4a", "5b", "pairs 4", "6b", "7a"]
    assert (plan.boots, plan.planned_pairs) == (4, 4)


def test_target_stops_at_its_first_stage_when_that_resolves_it():
    plan = _plan(target_pct=1.0, first_stage=2, max_boots=4)
    assert drive(BootScheduler(plan), Host({"a", "b"}), pairs=2).trace == ["0a", "1b", "2b", "3a"]
    assert plan.boots == 2


def test_a_resumed_target_run_goes_on_to_the_pairs_it_planned():
    plan = _plan(boots=3, target_pct=1.0, first_stage=2, max_boots=4, planned_pairs=4)
    disk = [FinishedBoot(i, arm, False) for i, arm in enumerate("abbaab")]
    run = drive(BootScheduler(plan, disk), Host({"a", "b"}), disk=disk)
    assert run.trace == ["pairs 4", "6b", "7a"]


@pytest.mark.parametrize(("decisions", "trace", "pairs"), [
    ((True,), ["0a", "1b", "2b", "3a", "4a", "5b"], 3),
    ((False, True), ["0a", "1b", "2b", "3a", "4a", "5b", "pairs 4", "6b", "7a"], 4),
    ((False, False, False), ["0a", "1b", "2b", "3a", "4a", "5b", "pairs 4", "6b", "7a", "pairs 5", "8a", "9b"], 5),
])
def test_a_stopping_rule_adds_a_pair_per_undecided_look_up_to_its_most(decisions, trace, pairs):
    from rig.compare.sequential import UntilDecided

    plan = _plan(boots=3)
    run = drive(BootScheduler(plan, until=UntilDecided(first=3, most=5)), Host({"a", "b"}), decisions=decisions)
    assert run.trace == trace and plan.boots == pairs


def test_a_finished_boot_of_another_position_is_refused():
    scheduler = BootScheduler(_plan())
    assert isinstance(scheduler.next(), BootJob)
    with pytest.raises(ValueError):
        scheduler.done(FinishedBoot(2, "b", False))
