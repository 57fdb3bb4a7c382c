"""What besides speed may differ between boots: host and image conditions (fingerprints), the
GPUs' clocks, power and clock-event reasons during every measured window, each boot's state (its
compile caches; the burn-in boots of the boot-state control) and the lines of the boot logs only
one arm printed."""

from __future__ import annotations

import fnmatch
import math
import re
from pathlib import Path

from pydantic import Field

from rig.boot.record import CacheState
from rig.compare.model import BURN_IN_BLOCK, BootEntry, ComparePlan
from rig.observe.fingerprint import FingerprintDifference, fingerprint_differences, voiding_differences
from rig.typed import Typed


class FingerprintReport(Typed):
    """How the boots' fingerprints differ, and which differences void the comparison."""

    boots: int
    differences: list[FingerprintDifference]
    voiding: list[FingerprintDifference]  # condition differences not accepted with --accept-fingerprint
    accepted: list[str]

_VOLATILE = [
    # A progress bar's state (tqdm: "12%|█▏   | 6/51 [00:00<00:03, 15.2it/s]"): vLLM's CUDA-graph
    # capture prints a dozen such lines per boot, each in one arm only by chance.
    (re.compile(r"\s*\d+%\|[^|]*\|\s*\d+/\d+\s*\[[^\]]*\]"), " <progress>"),
    (re.compile(r"\b\d{1,3}(\.\d{1,3}){3}:\d+"), "<ip>:<port>"),
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d([.,]\d+)?"), "<time>"),
    (re.compile(r"\b(\d\d-\d\d )?\d\d:\d\d:\d\d([.,]\d+)?\b"), "<time>"),  # vLLM's "12-01 23:42:00"
    (re.compile(r"\b\d+ secs?\b"), "<num> secs"),  # "Graph capturing finished in 6 secs"
    # The engines' periodic load lines: vLLM's "Running: 0 reqs, Waiting: 0 reqs" (in one arm only by
    # when the 10 s logger fired), SGLang's "#running-req: 1, #token: 2048".
    (re.compile(r"\b\d+ reqs\b"), "<num> reqs"),
    (re.compile(r"(#[\w-]+: )\d+"), r"\1<num>"),
    (re.compile(r"\[\d+\]"), "[<pid>]"),
    (re.compile(r"(?<![A-Za-z])(pid|PID)[ =:]\d+"), r"\1=<pid>"),  # SGLang's "kill_process_tree called: parent_pid=2667"
    # SGLang's request ids ("Received output for rid='3366cef9...' but the state was deleted", when a
    # client closed a stream at a window's end: in one arm only by chance)
    (re.compile(r"\b[0-9a-f]{32}\b"), "<id>"),
    (re.compile(r"\b\d+\.\d+(\s*(s|ms|us|it/s|%|GB|MB|tok/s))?"), "<num>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f-]{27}\b"), "<uuid>"),
    (re.compile(r"\d{8}-\d{6}-[\w.-]+-[0-9a-f]{4}"), "<boot>"),
]


def normalize(line: str) -> str:
    for pattern, replacement in _VOLATILE:
        line = pattern.sub(replacement, line)
    return line.strip()


LOG_MAX_BYTES = 256 << 20


def log_lines(path: str | None) -> set[str]:
    """A boot log's normalised lines; nothing for a log that is gone, or that is not a regular file of
    rig's own results (an entry read back names its log: it must not make rig read elsewhere)."""
    from rig import paths
    from rig.errors import Damaged, NotFound
    from rig.strict_yaml import read_inside

    if not path:
        return set()
    try:
        text = read_inside(Path(path), paths.results_dir(), LOG_MAX_BYTES).decode(errors="replace")
    except (NotFound, Damaged):
        return set()
    return {normalize(line) for line in text.splitlines() if line.strip()}


def boot_log_diff(entries: list[BootEntry], arms: list[str], lines: dict[str, set[str]]) -> dict[str, list[str]]:
    """Lines that appear in some boot of one arm and in no boot of any other arm (`lines`: boot
    "NN-arm" -> its normalised log lines, read by the caller)."""
    per_arm = {arm: set().union(*[lines.get(f"{e.index:02d}-{e.arm}", set()) for e in entries
                                  if e.arm == arm and not e.control and not e.burn_in] or [set()])
               for arm in arms}
    return {arm: sorted(lines - set().union(*[per_arm[o] for o in arms if o != arm]))[:50] for arm, lines in per_arm.items()}


def fingerprint_report(entries: list[BootEntry], accepted: list[str]) -> FingerprintReport:
    fingerprints = {f"{e.index:02d}-{e.arm}": e.fingerprint for e in entries if e.fingerprint and not e.voided and not e.burn_in}
    differences = fingerprint_differences(fingerprints) if len(fingerprints) > 1 else []  # type: ignore[arg-type]
    voiding = voiding_differences(differences, accepted)
    return FingerprintReport(boots=len(fingerprints), differences=differences, voiding=voiding, accepted=accepted)


GPU_EVENTS_FIELD = "gpu.clock_events"  # the name --accept-fingerprint takes for a clock-event difference


class GpuBoot(Typed):
    """One measured boot's serving GPUs over its usable windows."""

    boot: str  # NN-arm
    arm: str
    windows: int
    sm_mhz_mean: float | None  # mean over the windows of each window's mean, serving GPUs averaged
    sm_mhz_min: float | None
    power_w_mean: float | None
    temp_c_max: float | None
    clock_events: list[str]  # non-idle clock-event ("throttle") reasons seen in any window


class GpuConditions(Typed):
    """The GPUs during every measured window, and whether a clock-event reason (a power cap, thermal
    or hardware slowdown) held in the boots of some arm and in no boot of another: then that arm may
    have run at slower clocks, and the difference voids the verdict unless accepted
    (--accept-fingerprint gpu.clock_events). A reason seen in boots of every arm is reported only."""

    boots: list[GpuBoot]
    differing_events: list[str]  # reasons seen in some measured boots but not in all
    by_arm_events: list[str] = Field(default_factory=list)  # reasons seen in some arm's boots and in none of another's
    voiding: bool


def gpu_conditions(entries: list[BootEntry], accepted: list[str]) -> GpuConditions:
    boots = []
    for entry in entries:
        if not entry.measured:
            continue
        windows = [result.gpu for round_results in entry.rounds for result in round_results.values()
                   if result.usable and result.gpu]
        gpus = [t for window in windows for t in window.values()]
        if not gpus:
            continue
        sm = [t.sm_mhz for t in gpus if t.sm_mhz]
        power = [t.power_w for t in gpus if t.power_w]
        temps = [t.temp_c.max for t in gpus if t.temp_c]
        boots.append(GpuBoot(boot=f"{entry.index:02d}-{entry.arm}", arm=entry.arm, windows=len(windows),
                             sm_mhz_mean=sum(s.mean for s in sm) / len(sm) if sm else None,
                             sm_mhz_min=min(s.min for s in sm) if sm else None,
                             power_w_mean=sum(p.mean for p in power) / len(power) if power else None,
                             temp_c_max=max(temps) if temps else None,
                             clock_events=sorted({name for t in gpus for name in t.clock_events})))
    seen = [set(b.clock_events) for b in boots]
    differing = sorted(set().union(*seen) - set.intersection(*seen)) if seen else []
    arms = {b.arm for b in boots}
    by_arm = sorted(reason for reason in differing if {b.arm for b in boots if reason in b.clock_events} != arms)
    accepted_here = any(fnmatch.fnmatchcase(GPU_EVENTS_FIELD, pattern) for pattern in accepted)
    return GpuConditions(boots=boots, differing_events=differing, by_arm_events=by_arm, voiding=bool(by_arm) and not accepted_here)


class BurnInBoot(Typed):
    """A boot measured but paired with nothing, and what its boot state cost against the same arm's
    measured boots (the cold-boot effect, where it compiled)."""

    boot: str  # NN-arm
    why: str
    compile_cache: CacheState | None
    headline: dict[str, float | None]  # scenario -> mean of its usable rounds' headline figure
    vs_measured_pct: dict[str, float | None]  # scenario -> percent against the same arm's measured boots (geometric)


class BootState(Typed):
    """The boot-state control a comparison applied, the burn-in boots it kept, and whether the
    measured boots still differ in state (some compiled, some reused their caches: voids)."""

    control: str
    burn_in: list[BurnInBoot]
    compiled: list[str]  # measured boots whose engine log says they compiled
    reused: list[str]  # measured boots whose engine log says they reused every compilation
    voiding: bool


BOOT_STATE_FIELD = "compile_cache.log"


def accept_fingerprint_problem(pattern: str) -> str | None:
    """Why an --accept-fingerprint glob can never accept anything (None: it can): only a condition
    difference voids a comparison, so a glob that matches no condition field is a typo."""
    from rig.observe.fingerprint import field_classes

    conditions = [*field_classes()["condition"], GPU_EVENTS_FIELD, BOOT_STATE_FIELD]
    fields = [condition.replace("*", str(index)) for condition in conditions for index in range(64)]  # a GPU index each
    if any(fnmatch.fnmatchcase(field, pattern) for field in fields):
        return None
    return f"{pattern!r} matches no field whose difference voids a comparison (those are: {', '.join(sorted(set(conditions)))})"


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def boot_state(plan: ComparePlan, entries: list[BootEntry], headlines: dict[str, str]) -> BootState:
    """`headlines`: scenario -> its headline figure's name."""
    measured_logs = [e for e in entries if e.measured and e.compile_cache is not None and e.compile_cache.log]
    if not plan.boot_state_control:
        control = "none (--no-burn-in): each boot's cache state is recorded and checked, not controlled"
    elif not measured_logs and not plan.burn_in_first and not any(e.burn_in for e in entries):
        control = ("none needed: the engine keeps no compile caches (or logged no compilation), so its boots have no "
                   "cache state to differ in")
    elif plan.cold_caches:
        control = "every boot cold (--cold-caches: empty caches of its own, so every boot compiles, in the same state)"
    elif plan.burn_in_first:
        control = ("a burn-in boot of the baseline arm before block 0 (this engine keeps compile caches but its log does "
                   "not say whether a boot compiled, so the first boot is never measured)")
    else:
        control = ("a measured boot whose engine log says it compiled (its caches did not hold its configuration) is "
                   "kept as a burn-in and booted again")
    burn_in = []
    for entry in entries:
        if not entry.burn_in or entry.voided:
            continue
        why = ("the comparison's first boot" if entry.block == BURN_IN_BLOCK else
               "compiled (its caches did not hold this configuration): booted again")
        headline, versus = {}, {}
        for scenario, figure in headlines.items():
            own = entry.usable_figures(scenario, figure)
            headline[scenario] = sum(own) / len(own) if own else None
            measured = [sum(v) / len(v) for e in entries if e.measured and e.arm == entry.arm
                        and (v := e.usable_figures(scenario, figure))]
            reference = _geomean(measured)
            versus[scenario] = (100 * (headline[scenario] / reference - 1)
                                if headline[scenario] and reference else None)
        burn_in.append(BurnInBoot(boot=f"{entry.index:02d}-{entry.arm}" + ("" if entry.block == BURN_IN_BLOCK else ".burn-in"), why=why,
                                  compile_cache=entry.compile_cache, headline=headline, vs_measured_pct=versus))
    measured = [e for e in entries if e.measured]
    compiled = [f"{e.index:02d}-{e.arm}" for e in measured if e.compiled]
    reused = [f"{e.index:02d}-{e.arm}" for e in measured if e.compile_cache is not None and e.compile_cache.log == "reused"]
    if plan.boot_state_control and not plan.cold_caches and not plan.burn_in_first and (compiled or reused):
        control += (": every measured boot reused its caches" if not compiled else
                    f"; but {len(compiled)} measured boot(s) compiled again (the caches did not persist between boots), "
                    "so redoing stopped and the states are only recorded")
    accepted = any(fnmatch.fnmatchcase(BOOT_STATE_FIELD, pattern) for pattern in plan.accept_fingerprint)
    return BootState(control=control, burn_in=burn_in, compiled=compiled, reused=reused,
                     voiding=bool(compiled) and bool(reused) and not accepted)

