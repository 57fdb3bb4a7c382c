"""PNG output of every plot rig draws (timelines, comparisons, sweeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DPI = 110


def save_png(figure: Any, path: str | Path) -> Path:
    """Save a matplotlib figure as PNG without the "Software" text chunk matplotlib adds by default
    (its version and home page): a result file carries no outside address."""
    figure.savefig(path, dpi=DPI, metadata={"Software": None})
    return Path(path)
