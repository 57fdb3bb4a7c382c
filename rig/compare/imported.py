"""`rig import FILE --compare DIR --arm A [--block K]`: a run another tool measured (read into a rig
run by rig.load.peers) joins a comparison as one boot of arm A, and the report is rewritten.

Its round is what a comparison keeps of any round (rig.compare.measure.run_result: headline, problems,
goodput, latency histograms), so an imported boot's percentiles pool like rig's own."""

from __future__ import annotations

import time
from pathlib import Path

from rig.compare.entries import all_entries
from rig.compare.measure import boot_coherence_of, run_result
from rig.compare.model import IMPORTED_INDEX, BootEntry, ComparePlan
from rig.compare.output import write_report
from rig.compare.report import analyze
from rig.compare.trust import inside
from rig.errors import Damaged, Invalid, NotFound, RigError
from rig.load.peers import ImportedRun, import_file
from rig.load.records import read_records


def comparison_for(compare: Path, arm: str, scenario: str | None) -> ComparePlan:
    """The comparison an import joins, refused in one line when it is not one or lacks the arm or scenario."""
    try:
        plan = ComparePlan.read(compare)
    except NotFound:
        raise NotFound(str(compare), "--compare", "no comparison (plan.json) in this directory",
                       "name a results/compare/<timestamp> directory") from None
    except Damaged as error:
        raise Damaged(str(compare / "plan.json"), error.field, f"unreadable comparison plan ({error.problem})",
                      "name a complete comparison") from None
    if arm not in [a.name for a in plan.arms]:
        raise RigError("command line", "--arm", f"{arm!r} is not an arm of that comparison",
                       f"use one of {', '.join(a.name for a in plan.arms)}")
    if scenario is not None and scenario not in plan.scenarios:
        raise RigError("command line", "--scenario", f"{scenario} is not a scenario of that comparison",
                       f"use one of {', '.join(plan.scenarios)}")
    return plan


def import_into(compare: Path, file: Path, arm: str, scenario: str | None, block: int | None, out: Path | None) -> BootEntry:
    """`rig import FILE --compare DIR --arm A`: the run is written inside the comparison (its
    imported/ folder, or `out` when that lies inside it), as every path a boot entry names must
    (rig.compare.trust), then joined as a boot of `arm`."""
    plan = comparison_for(compare, arm, scenario)
    if out is not None and not inside(str(out), compare):
        raise Invalid("command line", "--out", f"{out} lies outside the comparison {compare}: a comparison reads only its own runs",
                      "leave --out out (the run goes to the comparison's imported/ folder), or name a folder inside it")
    imported = import_file(file, scenario or plan.scenarios[0], out, under=compare / "imported")
    return join(compare, plan, arm, block, imported, file)


def join(compare: Path, plan: ComparePlan, arm: str, block: int | None, imported: ImportedRun, source: Path,
         progress: bool = True) -> BootEntry:
    """Adds the imported run as a boot of `arm` in `block` (default: a new block) and rewrites the report."""
    entries = all_entries(compare, plan)
    index = max([IMPORTED_INDEX - 1, *(e.index for e in entries)]) + 1
    block = block if block is not None else max([e.block for e in entries], default=-1) + 1
    if block < 0 or any(e.block == block and e.arm == arm and not e.burn_in for e in entries):
        raise RigError("command line", "--block", f"block {block} already has a boot of {arm}",
                       "pick a block without one (its other arm's boot is the pair), or leave --block out")
    summary = imported.summary
    entry = BootEntry(index=index, block=block, arm=arm, spec=f"imported:{imported.tool}:{source.name}", control=False, attempt=1,
                      boot_id=summary.provenance.boot_id, started=min(summary.metrics.window.start, time.time()),
                      rounds=[{summary.name: run_result(summary, read_records(imported.run), imported.run, plan.slos)}])
    entry.coherence = boot_coherence_of(plan, entry)
    entry.write(compare)
    write_report(compare, analyze(plan, all_entries(compare, plan)))
    if progress:
        print(f"joined {compare} as boot {index} of arm {arm}, block {block}; report rewritten (compare.md)")
    return entry
