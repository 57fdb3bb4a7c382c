"""A comparison's report files, written from its analysis: compare.json (the analysis itself),
compare.md (markdown.py), boot-log-diff.txt and compare.png (plot.py)."""

from __future__ import annotations

from pathlib import Path

from rig.atomic import write_text_atomic
from rig.compare.markdown import markdown
from rig.compare.plot import plot
from rig.compare.report import Analysis


def write_report(out: Path, analysis: Analysis) -> str:
    write_text_atomic(out / "compare.json", analysis.json_text())
    text = markdown(analysis)
    write_text_atomic(out / "compare.md", text)
    write_text_atomic(out / "boot-log-diff.txt", "\n".join(
        f"== only in {arm} ==\n" + "\n".join(lines) for arm, lines in analysis.boot_log_diff.items()) + "\n")
    plot(analysis, out / "compare.png")
    return text
