"""Goodput: completed requests per second that met every SLO, as vLLM's `--goodput` defines it
(ttft, tpot and e2e limits; a request counts only if it meets all that are given)."""

from __future__ import annotations

import math

from rig.errors import RigError
from rig.load.records import RequestRecord
from rig.load.request_metrics import PER_REQUEST, done_in_window
from rig.load.summary import RunSummary
from rig.typed import Typed

SLO_KEYS = {"ttft": "time to first token", "tpot": "time per output token", "e2e": "end-to-end latency"}
# Every SLO key names a per-request figure of rig.load.request_metrics (tests/test_layering.py checks it).
_UNITS = {"ms": 0.001, "s": 1.0}


def parse_slos(text: str | None) -> dict[str, float] | None:
    """'ttft<=2s,tpot<=50ms' -> {'ttft': 2.0, 'tpot': 0.05} (seconds)."""
    if not text:
        return None
    slos = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, limit = part.partition("<=")
        unit = next((u for u in ("ms", "s") if limit.endswith(u)), None)
        try:
            value = float(limit[: -len(unit)]) * _UNITS[unit] if unit else None
        except ValueError:
            value = None
        if not sep or key.strip() not in SLO_KEYS or value is None or not math.isfinite(value) or value <= 0:
            raise RigError("command line", "--goodput", f"{part!r} is not KEY<=LIMIT with a unit",
                           f"write e.g. ttft<=2s,tpot<=50ms (keys: {', '.join(SLO_KEYS)})")
        if key.strip() in slos:
            raise RigError("command line", "--goodput", f"{key.strip()} is given twice", f"keep one {key.strip()}<=LIMIT")
        slos[key.strip()] = value
    return slos


class Goodput(Typed):
    """A round's goodput over its window's completed requests."""

    slos_s: dict[str, float]
    requests_per_s: float
    met: int
    completed: int
    share: float | None


def goodput(records: list[RequestRecord], summary: RunSummary, slos: dict[str, float]) -> Goodput:
    """A round's goodput over its window's completed requests (the ones its latencies cover)."""
    window = summary.metrics.window
    met = total = 0
    for done in done_in_window(records, window.start, window.end):
        total += 1
        # A request that decoded nothing after its first token has no TPOT: it cannot break a TPOT SLO.
        met += all((value := PER_REQUEST[key](done)) is None or value <= limit for key, limit in slos.items())
    return Goodput(slos_s=slos, requests_per_s=met / window.seconds, met=met, completed=total,
                   share=met / total if total else None)
