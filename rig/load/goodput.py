"""Goodput: completed requests per second that met every SLO, as vLLM's `--goodput` defines it
(ttft, tpot and e2e limits; a request counts only if it meets all that are given)."""

from __future__ import annotations

import math
import re

from rig.errors import Invalid
from rig.load.bounds import MAX_DURATION_S
from rig.load.records import RequestRecord
from rig.load.request_metrics import PER_REQUEST, done_in_window
from rig.load.summary import RunSummary
from rig.typed import Typed

SLO_KEYS = {"ttft": "time to first token", "tpot": "time per output token", "e2e": "end-to-end latency"}
# Every SLO key names a per-request figure of rig.load.request_metrics (tests/test_layering.py checks it).

# The names vLLM's `--goodput` takes: its e2el is rig's e2e.
SLO_ALIASES = {"ttft": "ttft", "tpot": "tpot", "e2e": "e2e", "e2el": "e2e"}
SLO_FORMAT = "ttft<=2s,tpot<=50ms, or vLLM's ttft:2000,tpot:50 (milliseconds; keys ttft, tpot, e2e or e2el)"
_UNITS = {"ms": 0.001, "s": 1.0}
MIN_SLO_S = 1e-6  # a limit below a microsecond is no latency a request can meet
_PLAIN = re.compile(r"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?")


def _limit(part: str) -> tuple[str, float | None]:
    """(key as written, limit in seconds or None) of `ttft<=2s` (a unit required) or `ttft:2000` (ms)."""
    if "<=" in part:
        key, _, limit = part.partition("<=")
        limit = limit.strip()
        unit = next((u for u in ("ms", "s") if limit.endswith(u)), None)
        number, scale = (limit[: -len(unit)].strip(), _UNITS[unit]) if unit else ("", 0.0)
    else:
        key, colon, number = part.partition(":")
        scale = _UNITS["ms"] if colon else 0.0
    if not _PLAIN.fullmatch(number) or not scale:
        return key.strip(), None
    value = float(number) * scale
    return key.strip(), value if slo_limit_ok(value) else None


def slo_limit_ok(seconds: float) -> bool:
    """An SLO limit a request can meet or miss: from MIN_SLO_S to MAX_DURATION_S."""
    return math.isfinite(seconds) and MIN_SLO_S <= seconds <= MAX_DURATION_S


def parse_slos(text: str | None, where: str = "command line", field: str = "--goodput") -> dict[str, float] | None:
    """'ttft<=2s,tpot<=50ms', or vLLM's 'ttft:2000 tpot:50' (milliseconds; commas or spaces) ->
    {'ttft': 2.0, 'tpot': 0.05} in seconds by rig's keys. One line per problem."""
    if text is None:
        return None
    slos: dict[str, float] = {}
    parts = text.split(",") if "<=" in text else re.split(r"[,\s]+", text)
    for part in filter(None, (p.strip() for p in parts)):
        key, value = _limit(part)
        name = SLO_ALIASES.get(key)
        if name is None or value is None:
            raise Invalid(where, field, f"{part[:40]!r} is not KEY<=LIMIT with a unit or KEY:MILLISECONDS, the limit from "
                          f"1 us to {MAX_DURATION_S:g} s", f"write e.g. {SLO_FORMAT}")
        if name in slos:
            raise Invalid(where, field, f"{name} is given twice (e2e and e2el are one key)" if name == "e2e" else
                          f"{name} is given twice", f"keep one {name} limit")
        slos[name] = value
    if not slos:
        raise Invalid(where, field, "names no SLO", f"write e.g. {SLO_FORMAT}")
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
