"""The one parser for adapter gates. Every gate is OFF unless set to something else than
0 / off / false / no / empty (case and surrounding blanks ignored)."""

from __future__ import annotations

import os
from collections.abc import Mapping

OFF_VALUES = frozenset({"", "0", "off", "false", "no"})


def gate_is_on(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in OFF_VALUES


def env_gate(name: str, environ: Mapping[str, str] | None = None) -> bool:
    return gate_is_on((os.environ if environ is None else environ).get(name))


def env_int(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """An integer setting; a malformed value raises instead of silently taking the default."""
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def env_float(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
