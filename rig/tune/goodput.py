"""Goodput as a race's objective: completed requests per second that met every SLO (DistServe's
definition, vLLM's `benchmark_serving --goodput ttft:MS tpot:MS e2el:MS`), computed for each
measured round from its per-request records (rig.load.records, rig.load.request_metrics).

The client's timing is part of the measurement (docs/client-error.md). Each round carries, for
every latency percentile, the client bound: the most the client could have moved it, as a share.
A request's SLO margin for a quantity (ttft, tpot, e2e) is the most the client could have moved
any percentile of that quantity in the round, in seconds: max over its percentiles of bound x
value (R17). A request whose value lies within that margin of a limit is ambiguous: the client
cannot say on which side of the SLO its true value lies. Goodput counts an ambiguous request as
missing the SLO, so the figure the race compares is a lower bound of the true goodput; the upper
bound (every ambiguous request counted as met) is reported beside it. A quantity whose percentiles
carry no bound in the round (the client could not bound them) makes every request ambiguous for it.

A round in which no request met every SLO measured 0, which the race's log scale cannot hold: it
enters as half a request over its window (a continuity correction), below any round with one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rig.compare.model import BootEntry, RunResult
from rig.errors import Invalid, NotFound
from rig.load.bounds import MAX_DURATION_S
from rig.load.client_error import UNBOUNDED
from rig.load.figures import FIGURES
from rig.load.goodput import SLO_ALIASES, slo_limit_ok
from rig.load.records import read_records
from rig.load.request_metrics import PER_REQUEST, done_in_window
from rig.load.scenarios import Scenario
from rig.typed import Typed

OBJECTIVE = "goodput_req_s"
# The percentile figures whose client bounds give each quantity's margin (RunResult.client_bounds).
BOUND_FIGURES = {samples: tuple((figure.name, float(figure.quantile)) for figure in FIGURES.values()
                                 if figure.samples == samples and figure.quantile in (0.50, 0.99))
                 for samples in ("ttft", "tpot", "e2e")}

MAPPING_EXAMPLE = "write e.g. goodput: {ttft: 500, tpot: 50} (milliseconds; keys ttft, tpot, e2e or e2el)"


def _limit_s(value: object, where: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not slo_limit_ok(value / 1000):
        raise Invalid(where, field, f"{value!r} is not a limit in milliseconds from 0.001 to {1000 * MAX_DURATION_S:g}",
                      MAPPING_EXAMPLE)
    return float(value) / 1000


def slos_from_mapping(raw: dict[str, object], where: str, field: str) -> dict[str, float]:
    """A space's `goodput: {ttft: 500, tpot: 50}` (milliseconds) -> SLOs in seconds by rig's keys."""
    out: dict[str, float] = {}
    for key, value in raw.items():
        name = SLO_ALIASES.get(str(key))
        if name is None:
            raise Invalid(where, f"{field}.{str(key)[:40]}", "is not an SLO the client measures per request",
                          f"use {', '.join(SLO_ALIASES)} (milliseconds)")
        if name in out:
            raise Invalid(where, f"{field}.{key}", f"{name} is given twice", f"keep one {name} limit")
        out[name] = _limit_s(value, where, f"{field}.{key}")
    if not out:
        raise Invalid(where, field, "names no SLO", MAPPING_EXAMPLE)
    return out


def check_measurable(slos: dict[str, float], scenario: Scenario, where: str, field: str) -> None:
    """Refuse, before anything boots, an SLO the scenario cannot give: a TPOT limit where every
    request returns one token (there is no time per output token after the first)."""
    if "tpot" in slos and scenario.max_tokens < 2:
        raise Invalid(where, f"{field}.tpot" if not field.startswith("-") else field,
                      f"scenario {scenario.name} asks for {scenario.max_tokens} token per request: no request has a TPOT",
                      "bound ttft or e2e only, or race a scenario that decodes")


class RoundGoodput(Typed):
    """One round's goodput under the SLOs, both readings of its ambiguous requests (R17)."""

    completed: int
    met: int  # met every SLO beyond doubt
    ambiguous: int  # missed no SLO beyond doubt, yet met some only within the client's margin
    window_s: float
    margins_s: dict[str, float | None]  # per quantity, the client's margin (None: no bound)

    @property
    def lower_req_s(self) -> float:
        """Goodput counting every ambiguous request as missing (what the race compares)."""
        return self.met / self.window_s

    @property
    def upper_req_s(self) -> float:
        return (self.met + self.ambiguous) / self.window_s

    @property
    def figure(self) -> float:
        """The lower bound on the race's log scale: a round with none met enters as half a request."""
        return max(self.met, 0.5) / self.window_s


def margins(result: RunResult, values: dict[str, list[float]]) -> dict[str, float | None]:
    """Per quantity, the most the client could have moved one of its percentiles, in seconds."""
    out: dict[str, float | None] = {}
    for key, per_request in values.items():
        moved = 0.0
        for figure, quantile in BOUND_FIGURES[key]:
            bound = result.client_bounds.get(figure)
            if bound is None or bound >= UNBOUNDED:
                out[key] = None
                break
            if per_request:
                moved = max(moved, bound * float(np.quantile(per_request, quantile)))
        else:
            out[key] = moved
    return out


def round_goodput(result: RunResult, slos: dict[str, float]) -> RoundGoodput:
    """The round's goodput from its records (rig.load.records.read_records) over its window. A round
    whose run directory is gone cannot be read as having met nothing: it is refused."""
    if result.window is None:
        raise Invalid(result.dir, "window", "the round records no measured window", "rerun the race's boot")
    if not Path(result.dir).is_dir():
        raise NotFound(result.dir, "(folder)", "the round's load run is not there: its requests cannot be counted",
                       "keep runs/ beside boots/ in the race's directory")
    start, end = result.window
    done = done_in_window(read_records(Path(result.dir)), start, end)
    values = {key: [v for d in done if (v := PER_REQUEST[key](d)) is not None] for key in slos}
    margin = margins(result, values)
    met = ambiguous = 0
    for request in done:
        sure, maybe = True, True
        for key, limit in slos.items():
            value = PER_REQUEST[key](request)
            if value is None:  # no TPOT (one token): it cannot break a TPOT SLO, as rig.load.goodput counts
                continue
            m = margin[key]
            if m is None:
                sure = False
                continue
            if value - m > limit:
                sure = maybe = False
            elif value + m > limit:
                sure = False
        met += sure
        ambiguous += maybe and not sure
    return RoundGoodput(completed=len(done), met=met, ambiguous=ambiguous, window_s=end - start, margins_s=margin)


def boot_goodput(entry: BootEntry, scenario: str, slos: dict[str, float]) -> list[RoundGoodput]:
    """Every usable round of a measured boot, read again from its records."""
    return [round_goodput(result, slos) for rounds in entry.rounds if (result := rounds.get(scenario)) is not None
            and result.usable and result.window is not None]


def goodput_boots(entries: list[BootEntry], scenario: str, slos: dict[str, float]) -> dict[str, dict[int, list[float]]]:
    """candidate -> race round -> its boot's round figures (the lower bound; rig.tune.rule's input)."""
    boots: dict[str, dict[int, list[float]]] = {}
    for entry in entries:
        if not entry.measured:
            continue
        rounds = boot_goodput(entry, scenario, slos)
        if rounds:
            boots.setdefault(entry.arm, {})[entry.block] = [r.figure for r in rounds]
    return boots

