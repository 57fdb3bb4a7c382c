"""`rig`'s exit codes: one table, read by the command handlers that return them, by `rig --help`
and by README.md ("Exit codes"; a test holds the two together). Standard library only."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    FAILED = 1  # a check said no, or a step failed (its own output says which)
    BAD_INPUT = 2  # a RigError (one line: file, field, fix) or a command line argparse refused
    BOOT_CHECK = 3  # `rig up`: healthy, but the boot check failed (adapters, boot log)
    UNUSABLE = 4  # `rig loadtest`: a measured run is not usable; `rig compare`: no usable boot pair; `rig sweep --goodput`: no load met the SLOs
    BLIND_CONTROL = 5  # `rig compare --control`: the control arm did not change greedy output
    VOID = 6  # `rig compare`: the boots ran under different conditions; no verdict stands
    INTERRUPTED = 130  # Ctrl-C (what was measured is kept)


SIGNALLED = 128  # SIGTERM/SIGHUP: 128 + the signal's number, after the same cleanup as Ctrl-C

MEANINGS = {
    Exit.OK: "success",
    Exit.FAILED: "a check said no or a step failed: validate, render --check, status (an unreadable state, a server "
                 "that is up but not healthy, or one that died without `rig down`), audit, adapters check, rehearse, a boot that never became healthy, chat (the "
                 "server failed the request or ended the stream without a finish reason); build: docker build's own code",
    Exit.BAD_INPUT: "bad input: one line naming the file, the field and the fix (or a command-line usage error)",
    Exit.BOOT_CHECK: "up: the server is healthy but its boot check failed (adapters not armed, boot-log rules)",
    Exit.UNUSABLE: "loadtest: a measured run is not usable (its notes say why); compare: no boot pair had a usable headline "
                   "in both arms (\"no data\"; its report says why each round was left out); sweep --goodput: no load met the SLOs; "
                   "make demo: as compare",
    Exit.BLIND_CONTROL: "compare --control: the control arm did not change greedy output (the check cannot discriminate)",
    Exit.VOID: "compare (and make demo): the boots ran under different conditions (fingerprints); no verdict stands",
    Exit.INTERRUPTED: "interrupted (Ctrl-C); what was measured is kept",
}


def help_text() -> str:
    lines = [f"  {int(code):3}  {MEANINGS[code]}" for code in Exit]
    lines.append(f"  {SIGNALLED}+N  stopped by signal N (SIGTERM, SIGHUP), after the same cleanup as Ctrl-C")
    return "exit codes:\n" + "\n".join(lines)
