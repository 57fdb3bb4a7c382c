"""Samples files: one JSON object a line, appended and flushed as taken, so a killed run keeps them."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from rig import strict_yaml


def append(out: IO[str], entry: dict[str, Any]) -> None:
    out.write(json.dumps(entry) + "\n")
    out.flush()


MAX_BYTES = 1 << 31  # a day of 1 s scrapes of a large engine's /metrics is under 1 GiB


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no number")


def read(path: Path | str, keep: Callable[[dict[str, Any]], bool] = lambda entry: True) -> list[dict[str, Any]]:
    """Every complete line that is an object with a finite "time" (if it has one) and that `keep`
    accepts; a line cut by a kill mid-write, or anything else (NaN, a bare number, a list), is
    skipped, as a sample not taken. A file that is not a regular one (a FIFO, a link to /dev/zero)
    is one RigError line, never read."""
    entries = []
    for line in strict_yaml.read_regular(Path(path), MAX_BYTES).decode("utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line, parse_constant=_no_constant)
        except ValueError:
            continue
        if isinstance(entry, dict) and finite(entry.get("time", 0.0)) and keep(entry):
            entries.append(entry)
    return entries


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
