"""`rig`'s exit codes: one table, read by the command handlers that return them, by `rig --help`,
by the Makefile (`python -m rig.exits CODE` names a code rig exited with) and by the docs' exit-code
table (a test holds the two together). Standard library only."""

from __future__ import annotations

import sys
from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    FAILED = 1  # a check said no, or a step failed (its own output says which)
    BAD_INPUT = 2  # a RigError (one line: file, field, fix) or a command line argparse refused
    BOOT_CHECK = 3  # `rig up`: healthy, but the boot check failed (adapters, boot log)
    UNUSABLE = 4  # `rig loadtest`: a measured run is not usable; `rig compare`: no usable boot pair; `rig sweep --goodput`: no load met the SLOs
    BLIND_CONTROL = 5  # `rig compare --control`: the control arm did not change greedy output
    VOID = 6  # `rig compare`: the boots ran under different conditions; no verdict stands
    UNDECIDED = 7  # `rig demo`, `rig compare --until-decided`: the rule ran out of pairs; `rig tune`: a budget ended it undecided
    INTERRUPTED = 130  # Ctrl-C (what was measured is kept)


SIGNALLED = 128  # SIGTERM/SIGHUP: 128 + the signal's number, after the same cleanup as Ctrl-C

MEANINGS = {
    Exit.OK: "success",
    Exit.FAILED: "a check said no or a step failed: validate, render --check, status (an unreadable state, a server "
                 "that is up but not healthy, or one that died without `rig down`), audit, adapters check, make rehearse, a boot that never became healthy, chat (the "
                 "server failed the request or ended the stream without a finish reason); build: docker build's own code",
    Exit.BAD_INPUT: "bad input: one line naming the file, the field and the fix (or a command-line usage error)",
    Exit.BOOT_CHECK: "up: the server is healthy but its boot check failed (adapters not armed, boot-log rules)",
    Exit.UNUSABLE: "loadtest: a measured run is not usable (its notes say why; in the default series a run only the client "
                   "could not measure is skipped instead); compare: no boot pair had a usable headline "
                   "in both arms (\"no data\"; its report says why each round was left out); sweep --goodput: no load met the SLOs; "
                   "demo: as compare",
    Exit.BLIND_CONTROL: "compare --control: the control arm did not change greedy output (the check cannot discriminate)",
    Exit.VOID: "compare (and demo): the boots ran under different conditions (fingerprints); no verdict stands; "
               "tune: the same, and the race stopped at the boot that differed",
    Exit.UNDECIDED: "demo: every pair its stopping rule allows ran and the interval still spans 0: this machine is too busy "
                    "to resolve the known slowdown (run it again when it is quieter); compare --until-decided: every pair "
                    "its rule allows ran and a headline interval still spans 0; tune: a budget (rounds, boots, "
                    "minutes) ended the race with candidates not told apart (tune.md names them)",
    Exit.INTERRUPTED: "interrupted (Ctrl-C); what was measured is kept",
}

# One short phrase per code: the line a `make` target prints when rig fails (make itself exits 2).
SHORT = {
    Exit.OK: "success",
    Exit.FAILED: "a check said no or a step failed",
    Exit.BAD_INPUT: "bad input",
    Exit.BOOT_CHECK: "healthy, but the boot check failed",
    Exit.UNUSABLE: "not usable: a measured run, or no usable boot pair",
    Exit.BLIND_CONTROL: "the control arm did not change greedy output",
    Exit.VOID: "the boots ran under different conditions",
    Exit.UNDECIDED: "undecided: the noise left the answer open",
    Exit.INTERRUPTED: "interrupted",
}


def help_text() -> str:
    lines = [f"  {int(code):3}  {MEANINGS[code]}" for code in Exit]
    lines.append(f"  {SIGNALLED}+N  stopped by signal N (SIGTERM, SIGHUP), after the same cleanup as Ctrl-C")
    return "exit codes:\n" + "\n".join(lines)


def short(code: int) -> str:
    """What an exit code means, in a few words (a code outside the table is said to be so)."""
    if code in Exit._value2member_map_:
        return SHORT[Exit(code)]
    if SIGNALLED < code < SIGNALLED + 65:
        return f"stopped by signal {code - SIGNALLED}"
    return "not one of rig's codes"


def make_line(code: int) -> str:
    """The last line of a `make` target whose rig command failed: GNU make exits 2 whenever a recipe
    fails, whatever its code, so the target names rig's own code and what it means."""
    return f"make: rig exited {code} ({short(code)}); make's own exit status is 2 for any failure"


if __name__ == "__main__":  # `python -m rig.exits CODE`: the Makefile's last line when rig fails
    try:
        print(make_line(int(sys.argv[1])), file=sys.stderr)
    except (IndexError, ValueError):
        print("usage: python -m rig.exits CODE", file=sys.stderr)
        sys.exit(Exit.BAD_INPUT)
