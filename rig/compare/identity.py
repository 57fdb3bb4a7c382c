"""Did the change change the outputs: greedy identity at c=1 (reproducibility within an arm first)
and the load tests' own temperature-0 outputs compared across arms."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from rig.compare.model import BootEntry
from rig.errors import RigError
from rig.load.records import read_records
from rig.load.summary import RunSummary
from rig.typed import Typed


class ControlCheck(Typed):
    """Whether the control arm (known to change greedy output) was told apart from the baseline."""

    arm: str
    differing_prompts: list[str]
    compared_with_boots: int | None = None
    discriminates: bool | None  # None: not measured
    note: str | None


class GreedyIdentity(Typed):
    """Greedy identity at c=1: within each arm first (reproducibility), then across arms."""

    prompts: list[str]
    status: str
    identical_within_arm: dict[str, dict[str, bool]]  # arm -> prompt -> every boot gave one output
    identical_across_arms: dict[str, bool]
    boots_per_arm: dict[str, int]
    control: ControlCheck | None = None


class BatchingIdentity(Typed):
    """The load tests' temperature-0 outputs for the same prompt and nonce, across arms."""

    compared_prompts: int
    identical: int
    differing: int
    arms: list[str]
    unreadable: list[str] = Field(default_factory=list)  # rounds whose records could not be read back: left out


def greedy_report(entries: list[BootEntry], arms: list[str], control: str | None) -> GreedyIdentity:
    """Identity proves something only where the server reproduces itself: within-arm identity first
    (else inconclusive), then across arms; the control is compared per prompt against every boot
    of the baseline, and discriminates only if the baseline was reproducible."""
    usable = [e for e in entries if not e.voided and not e.burn_in and e.greedy]
    main = [e for e in usable if not e.control]
    prompts = sorted({p for e in main for p in e.greedy})
    within = {arm: {p: len({e.greedy.get(p) for e in main if e.arm == arm}) == 1 for p in prompts}
              for arm in arms if any(e.arm == arm for e in main)}
    reproducible = {p: all(within[arm].get(p, False) for arm in within) for p in prompts}
    across = {p: len({e.greedy.get(p) for e in main}) == 1 for p in prompts}
    unmeasured = [arm for arm in arms if not any(e.arm == arm for e in main)]
    single = [arm for arm in arms if sum(e.arm == arm for e in main) == 1]
    if not prompts:
        status = "not measured (no usable boot)"
    elif unmeasured:
        status = f"not measured for {', '.join(unmeasured)} (no usable boot)"
    elif single:
        status = f"inconclusive: one usable boot of {', '.join(single)}, so reproducibility within the arm is unknown"
    elif not all(reproducible.values()):
        bad = [p for p, ok in reproducible.items() if not ok]
        status = f"inconclusive: the server is not reproducible within an arm ({', '.join(bad)})"
    elif all(across.values()):
        status = "identical"
    else:
        status = f"CHANGED: {sum(not v for v in across.values())}/{len(prompts)} prompts differ between arms"
    result = GreedyIdentity(prompts=prompts, status=status, identical_within_arm=within, identical_across_arms=across,
                            boots_per_arm={arm: sum(e.arm == arm for e in main) for arm in arms})
    controls = [e for e in usable if e.control]
    baseline = [e for e in main if e.arm == arms[0]]
    if control and controls and baseline:
        differing = [p for p in prompts if all(controls[0].greedy.get(p) != b.greedy.get(p) for b in baseline)]
        baseline_reproducible = all(within.get(arms[0], {}).values())
        result.control = ControlCheck(arm=control, differing_prompts=differing, compared_with_boots=len(baseline),
                                      discriminates=bool(differing) and baseline_reproducible,
                                      note=None if baseline_reproducible else "the baseline is not reproducible within its boots")
    elif control:
        result.control = ControlCheck(arm=control, differing_prompts=[], discriminates=None,
                                      note="the control boot (or every baseline boot) was voided")
    return result


OutputKey = tuple[str, str, str]  # (scenario, prompt, nonce): the same request in every arm, round by round


def load_test_outputs(entries: list[BootEntry], greedy: dict[str, bool]) -> tuple[dict[str, dict[OutputKey, set[str]]], list[str]]:
    """(boot "NN-arm" -> each temperature-0 request's output digests, read from its rounds' records;
    the rounds whose records are damaged, each named with its reason). The one place the identity
    under batching reads files: a damaged round is left out of it, and said so, never fatal (its
    figures were summarised when it ran)."""
    out: dict[str, dict[OutputKey, set[str]]] = {}
    unreadable: list[str] = []
    for entry in entries:
        if not entry.measured:
            continue
        boot = f"{entry.index:02d}-{entry.arm}"
        mine = out.setdefault(boot, {})
        for number, round_results in enumerate(entry.rounds, start=1):
            for name, result in round_results.items():
                if not greedy.get(name):
                    continue
                directory, where = Path(result.dir), f"boot {boot} round {number} {name}"
                if not directory.is_dir():  # the rounds name their directories in full: a moved comparison loses them
                    unreadable.append(f"{where}: its run directory {directory} is gone (moved or removed)")
                    continue
                try:
                    records = read_records(directory)
                    counted = RunSummary.read(directory).metrics.requests.total
                except RigError as error:
                    unreadable.append(f"{where}: {error}")
                    continue
                if len(records) != counted:  # records lost (or added) since the round ran
                    unreadable.append(f"{where}: {len(records)} request records where its summary counted {counted}")
                    continue
                for record in records:
                    if record.complete and record.text_sha256:
                        mine.setdefault((name, record.prompt, record.prompt_nonce or ""), set()).add(record.text_sha256)
    return out, unreadable


def batching_identity(entries: list[BootEntry], arms: list[str], outputs: dict[str, dict[OutputKey, set[str]]],
                      unreadable: list[str] | None = None) -> BatchingIdentity:
    """The load tests' own outputs at temperature 0 (`outputs`: load_test_outputs): the same prompt
    (name and nonce, which repeat across arms round by round) compared across arms. Batch composition
    may legitimately change greedy output, so this is reported beside the c=1 identity, not as a verdict."""
    by_key: dict[OutputKey, dict[str, set[str]]] = {}
    for entry in entries:
        for key, digests in outputs.get(f"{entry.index:02d}-{entry.arm}", {}).items() if entry.measured else ():
            by_key.setdefault(key, {}).setdefault(entry.arm, set()).update(digests)
    shared = {k: v for k, v in by_key.items() if len(v) >= 2}
    identical = sum(1 for v in shared.values() if len(set().union(*v.values())) == 1)
    return BatchingIdentity(compared_prompts=len(shared), identical=identical, differing=len(shared) - identical, arms=arms,
                            unreadable=list(unreadable or []))

