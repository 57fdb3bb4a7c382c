"""The order a comparison boots in, as one state machine: given the plan and every boot that
finished so far (read back from a resumed comparison's directory, or reported by this process),
`BootScheduler.next()` names the next step: a boot to run (`BootJob`), a judgement the caller
owes (`LookDue`: the stopping rule's look; `PairsDue`: Stein's second stage), a pair added to the
plan (`Extended`: the caller writes the plan), or `Done`. It does no I/O, boots nothing and reads
no clock, so every path is tested without a boot (tests/compare/test_compare_schedule.py).

The boot-state rule it holds: a measured boot that compiled its torch.compile graph can decode
slower for its whole life than boots that reused it, so a measured boot booted with
`redo_if_compiled` that reports it compiled is filed as its position's burn-in and the position is
booted again at once; when that second boot compiles too, the caches do not persist
(`keeps_compiling`) and no later boot is redone. The control is measured for its outputs only, so a
control boot that compiled is kept. A resumed comparison may run on a fresh host whose caches hold
nothing of the earlier burn-ins: an arm's first boot in this process is therefore booted with
`redo_if_compiled` even where its position already holds a burn-in, and a new burn-in supersedes
that one (`BootJob.supersedes`).

A boot pair holds one GPU: two GPUs of one model can differ in speed by more than the effect a
comparison resolves, so a pair split across them measures the GPUs. When a pair's boots ran on
different GPUs (a comparison resumed mid-pair on another host), the boots that differ from the
pair's latest are set aside (`BootScheduler.set_aside`, for the caller to move to
boots/superseded/) and their positions booted again, on this host. Only boots of an earlier process
are set aside: where this process's own boots land on different GPUs (a driver that places each
boot anew), booting again would move again, without end; the fingerprint differences name it.
Boots whose fingerprints name no GPU are never set aside."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from rig.compare.arms import Arm
from rig.compare.model import BURN_IN_BLOCK, ComparePlan
from rig.compare.sequential import UntilDecided


@dataclass(frozen=True)
class FinishedBoot:
    """A boot that finished and was written (its entry), as the schedule needs it."""

    index: int  # its position in the plan's order
    arm: str
    compiled: bool  # the engine's log says it compiled
    voided: bool = False
    burn_in: bool = False  # a burn-in (the planned one, or a measured position's compiled first boot)
    gpus: str = ""  # the GPUs it ran on, by uuid (BootEntry.gpus; "" where unknown)


@dataclass(frozen=True)
class BootJob:
    """One boot to run: the position, and how to treat it."""

    index: int  # position in the plan's order (boots/NN-arm.json)
    block: int  # its ABBA block (BURN_IN_BLOCK: the planned burn-in, paired with nothing)
    arm: Arm
    burn_in: bool = False  # the planned burn-in boot: rounds only
    redo_if_compiled: bool = False  # a boot that compiles becomes a burn-in as soon as it is healthy
    again: bool = False  # the second boot of a position whose first compiled (no new progress line)
    supersedes: bool = False  # a burn-in of this boot replaces the position's earlier one (boots/superseded/)
    boots_in_order: int = 0  # the order's length, for the progress line
    boots_left: int = 0  # boots not yet run, counting this one and the pairs --target planned
    arms_may_compile: int = 0  # arms not booted by this process that may still compile (and be redone)
    boots_rule_may_add: int = 0  # boots of the pairs a stopping rule may still add (its most, less those planned)


class Filing(Enum):
    """Where a finished boot's entry goes."""

    ENTRY = "entry"  # boots/NN-arm.json: the position's boot
    BURN_IN = "burn-in"  # boots/NN-arm.burn-in.json: it compiled, and its position is booted again


@dataclass(frozen=True)
class LookDue:
    """The order ran: the stopping rule looks at the entries (`BootScheduler.looked`)."""


@dataclass(frozen=True)
class PairsDue:
    """Stein's first stage ran: its sd fixes how many pairs to run (`BootScheduler.planned`)."""


@dataclass(frozen=True)
class Extended:
    """One more pair (an ABBA block) was added to the plan: the caller writes the plan."""

    boots: int


@dataclass(frozen=True)
class Done:
    """Every boot the plan asks for has finished."""


Step = BootJob | LookDue | PairsDue | Extended | Done


@dataclass
class _Position:
    burn_in: FinishedBoot | None = None  # a measured position's compiled first boot
    boot: FinishedBoot | None = None  # the position's boot (measured, control, or the planned burn-in)


@dataclass
class BootScheduler:
    """The boot order of `plan` from the boots already `finished` (a resume's, read from disk).
    `plan.boots` and `plan.planned_pairs` grow in place as --target or `until` add pairs."""

    plan: ComparePlan
    finished: list[FinishedBoot] = field(default_factory=list)
    until: UntilDecided | None = None
    keeps_compiling: bool = False  # a boot compiled again right after its burn-in: the caches do not persist
    booted: set[str] = field(default_factory=set)  # arms this process booted (their caches hold them now)

    def __post_init__(self) -> None:
        self.positions: dict[int, _Position] = {}
        for boot in self.finished:
            position = self.positions.setdefault(boot.index, _Position())
            if boot.burn_in and self._measured(boot.index):
                position.burn_in = boot
            else:
                position.boot = boot
        self.cursor = 0  # the first position not yet walked past
        self.pending: BootJob | None = None
        self.judged = False  # the caller answered this pass's LookDue or PairsDue
        self.decided = False
        self.set_aside: list[FinishedBoot] = []  # boots of split pairs the caller moves aside (then clears)
        self.ran: set[int] = set()  # positions whose boot this process filed
        for block in sorted({block for block, _ in self.plan.order() if block != BURN_IN_BLOCK}):
            self._unsplit(block)

    @property
    def redoes(self) -> bool:
        """A compiled boot can be booted again (not where the engine's log cannot say: a burn-in opens instead)."""
        return self.plan.boot_state_control and not self.plan.cold_caches and not self.plan.burn_in_first

    def _measured(self, index: int) -> bool:
        order = self.plan.order()
        return index < len(order) and order[index][0] != BURN_IN_BLOCK

    def next(self) -> Step:
        """The next step: the first position of the order with no boot of its own (the same job again
        until `done` reports it), else what the order's end asks for."""
        if self.pending is not None:
            return self.pending
        order = self.plan.order()
        while self.cursor < len(order):
            block, arm = order[self.cursor]
            position = self.positions.setdefault(self.cursor, _Position())
            if position.boot is None:
                self.pending = self._job(self.cursor, block, arm, position)
                return self.pending
            if position.burn_in is not None and position.boot.compiled:
                self.keeps_compiling = True  # read back: a boot that compiled right after its burn-in
            self.cursor += 1
        return self._after_order()

    def _job(self, index: int, block: int, arm: Arm, position: _Position) -> BootJob:
        burn_in = block == BURN_IN_BLOCK
        order = self.plan.order()
        # An arm's first boot in this process may compile whatever its position saw before: a resumed
        # comparison can run on a fresh host, whose caches hold nothing of the earlier burn-ins.
        redo = (self.plan.boot_state_control and not self.plan.cold_caches and not burn_in
                and arm is not self.plan.control and not self.keeps_compiling
                and (position.burn_in is None or arm.name not in self.booted))
        # arms that may still compile and be booted again (never the control: its compile is kept)
        may_compile = ({a.name for _, a in order[index:] if a is not self.plan.control} - self.booted
                       if self.redoes and not self.keeps_compiling else set())
        # --target's later blocks: the pairs its first stage planned (or, before that, the first stage only)
        later = max(0, (self.plan.planned_pairs or self.plan.boots) - self.plan.boots) * len(self.plan.arms)
        return BootJob(index=index, block=block, arm=arm, burn_in=burn_in, redo_if_compiled=redo,
                       supersedes=redo and position.burn_in is not None,
                       boots_in_order=len(order), boots_left=len(order) - index + later,
                       arms_may_compile=len(may_compile),
                       boots_rule_may_add=max(0, self.until.most - self.plan.boots) * len(self.plan.arms) if self.until else 0)

    def done(self, boot: FinishedBoot) -> Filing:
        """The pending job's boot finished: where its entry goes. A boot that was to be redone if it
        compiled, and did (healthy: not voided), is the position's burn-in; the position is booted
        again next, without the redo (a second compile says the caches do not persist)."""
        job = self.pending
        if job is None or (boot.index, boot.arm) != (job.index, job.arm.name):
            raise ValueError(f"boot {boot.index} ({boot.arm}) finished, but the pending boot is "
                             f"{'none' if job is None else f'{job.index} ({job.arm.name})'}")
        position = self.positions[job.index]
        if job.redo_if_compiled and boot.burn_in and not boot.voided:
            position.burn_in = boot
            self.pending = BootJob(index=job.index, block=job.block, arm=job.arm, again=True,
                                   boots_in_order=job.boots_in_order, boots_left=job.boots_left)
            return Filing.BURN_IN
        if position.burn_in is not None and boot.compiled:
            self.keeps_compiling = True  # compiled right after its position's burn-in: the caches do not persist
        position.boot = boot
        self.booted.add(job.arm.name)
        self.ran.add(job.index)
        self.pending = None
        self.cursor += 1
        if not job.burn_in:
            self._unsplit(job.block, latest=job.index)
        return Filing.ENTRY

    def _unsplit(self, block: int, latest: int | None = None) -> None:
        """Keeps `block`'s pair on one GPU: a measured boot of an earlier process in the block that
        ran on other GPUs than its latest boot (`latest`: the position that just finished; read back
        from disk, the highest position finished) is set aside and its position booted again. The
        control is measured for its outputs only and stays."""
        control = self.plan.control.name if self.plan.control else None
        boots = {index: position.boot for index, (b, arm) in enumerate(self.plan.order())
                 if b == block and arm.name != control and (position := self.positions.get(index)) is not None
                 and position.boot is not None and not position.boot.voided}
        if latest is None:
            latest = max(boots, default=None)
        reference = boots.get(latest) if latest is not None else None
        if reference is None or not reference.gpus:
            return
        for index, boot in boots.items():
            if boot.gpus and boot.gpus != reference.gpus and index not in self.ran:
                self.set_aside.append(boot)
                self.positions[index].boot = None
                self.cursor = min(self.cursor, index)

    def _after_order(self) -> Step:
        plan = self.plan
        if self.until is not None:
            if not self.judged:
                return LookDue()
            if self.decided or plan.boots >= self.until.most:
                return Done()
            return self._extend()
        if plan.target_pct is None:
            return Done()
        if plan.planned_pairs is None:
            return PairsDue()
        if plan.boots >= plan.planned_pairs:
            return Done()
        return self._extend()

    def _extend(self) -> Extended:
        self.plan.boots += 1
        self.judged = self.decided = False
        return Extended(self.plan.boots)

    def looked(self, decided: bool) -> None:
        """The stopping rule's look at the order that ran: decided stops, else one more pair (up to its most)."""
        self.judged, self.decided = True, decided

    def planned(self, pairs: int) -> None:
        """Stein's second stage: the pairs the first stage's sd asks for."""
        self.plan.planned_pairs = pairs
