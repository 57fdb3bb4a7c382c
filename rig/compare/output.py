"""A comparison's report files, written from its analysis: compare.json (the analysis itself),
compare.md (markdown.py), boot-log-diff.txt and compare.png (plot.py)."""

from __future__ import annotations

from pathlib import Path

from rig.atomic import write_text_atomic
from rig.compare.markdown import headline_verdicts, markdown
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


def answer(analysis: Analysis) -> list[str]:
    """What `rig compare` prints: the verdict of every headline, one line each (or why no verdict
    stands), and greedy identity. Everything else is in compare.md."""
    if analysis.void:  # no verdict stands: the figures are in compare.md for the diagnosis
        return [f"compare: VOID: {analysis.void}"]
    lines = []
    if analysis.no_data:
        lines.append("compare: NO DATA: no boot pair had a usable headline in both arms (compare.md says why each round "
                     "was left out)")
    lines += [f"compare: {line}" for line in headline_verdicts(analysis)]
    if analysis.target is not None:
        lines.append(f"compare: {analysis.target.status}")
    greedy = analysis.greedy
    if greedy.prompts:
        n = len(greedy.prompts)
        lines.append(f"compare: greedy outputs: {greedy.status}; identical across arms for "
                     f"{sum(greedy.identical_across_arms.values())}/{n} prompts")
    return lines
