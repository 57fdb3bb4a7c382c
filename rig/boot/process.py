"""Which process a pid is, as the kernel tells it: start time, process group, boot id.

A pid in a state file is only a number; after the server exits the kernel hands it to any new
process. rig records the process's start time (field 22 of /proc/<pid>/stat, clock ticks since
the kernel booted, with the kernel's boot time) and passes the server its boot id in the
environment (RIG_BOOT_ID). A recorded pid is "ours" only while both still match; a group is
signalled only through a leader that is ours. While a group exists its id cannot be handed to
another process (Linux keeps a pid allocated while it names a live group), so a group whose
leader has exited still belongs to the boot that started it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, Literal

BOOT_ID_ENV = "RIG_BOOT_ID"
PROC = "/proc"


@dataclass(frozen=True)
class Identity:
    start_ticks: int  # /proc/<pid>/stat field 22: starttime, clock ticks after the kernel booted
    kernel_boot: int  # /proc/stat btime: when the kernel booted (epoch seconds)

    @property
    def started(self) -> float:
        """Start time as epoch seconds (for people; comparisons use the exact fields)."""
        return self.kernel_boot + self.start_ticks / os.sysconf("SC_CLK_TCK")


def kernel_boot_time() -> int:
    with open(f"{PROC}/stat", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("btime "):
                return int(line.split()[1])
    raise OSError("no btime in /proc/stat")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (after the parenthesised command name), or None if no such pid."""
    try:
        with open(f"{PROC}/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2:].split()


def identity(pid: int) -> Identity | None:
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return Identity(start_ticks=int(fields[22 - 3]), kernel_boot=kernel_boot_time())


def process_group(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[5 - 3])


def boot_id_of(pid: int) -> str | None | Literal[False]:
    """RIG_BOOT_ID from the process's environment; None if it has none, False if unreadable
    (another user's process without root)."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except PermissionError:
        return False
    prefix = BOOT_ID_ENV.encode() + b"="
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


Verdict = Literal["ours", "gone", "other"]


def check(pid: int, expected: Identity | None, boot_id: str) -> tuple[Verdict, str]:
    """Is `pid` still the group leader rig started for `boot_id`? ('ours' | 'gone' | 'other', why)."""
    now = identity(pid)
    if now is None:
        return "gone", f"process {pid} is gone"
    if expected is None:
        return "other", f"the state records no start time for pid {pid}, so it cannot be told from a new process"
    if now != expected:
        return "other", (f"pid {pid} now belongs to another process (started {now.started:.0f}, "
                         f"the server started {expected.started:.0f})")
    if process_group(pid) != pid:
        return "other", f"pid {pid} is no longer a process group leader"
    found = boot_id_of(pid)
    # exited, not yet reaped: its environ reads empty
    if found is not False and not exited(pid) and found != boot_id:
        return "other", f"pid {pid} carries {BOOT_ID_ENV}={found}, not {boot_id}"
    return "ours", f"pid {pid} is boot {boot_id}"


def group_members(pgid: int) -> list[int]:
    """Processes of group `pgid` that still run: exited ones waiting to be reaped (zombies) do not
    count. A zombie holds no memory and no GPU, but it answers kill(0); where the reaper is slow
    (an init that does not wait, as on some VMs and containers) a stopped server would look alive."""
    members = []
    for entry in os.listdir(PROC):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and int(fields[5 - 3]) == pgid and fields[0] != "Z":
                members.append(int(entry))
    return members


def exited(pid: int) -> bool:
    """The process has exited and waits to be reaped (a zombie: it holds nothing, serves nothing)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] == "Z"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(group_members(pgid))


def command_name(pid: int) -> str:
    """The process's command name (/proc/PID/comm), or "gone"."""
    try:
        with open(f"{PROC}/{pid}/comm") as handle:
            return handle.read().strip() or "?"
    except OSError:
        return "gone"


def listeners(host: str, port: int) -> list[int | None]:
    """The processes listening on `port` where a connection to `host` would reach them (that address
    or a wildcard); None for one whose process this user cannot see (another user's)."""
    import psutil

    reached = {host, "0.0.0.0", "::", f"::ffff:{host}"}  # noqa: S104 - addresses a listener may hold; nothing binds here
    return [c.pid for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.laddr.ip in reached]


class HeldSignals:
    """Holds Ctrl-C, SIGTERM and SIGHUP while a child is spawned and its pid recorded, then
    delivers the first one held to the handler that was in place.

    A signal that lands inside `subprocess.Popen` after the fork, or before the caller stored the
    returned process, raises there: the child runs on, in a session of its own that the terminal's
    Ctrl-C and `timeout`'s relay never reach, and no pid names it, so nothing stops it. The process's
    signal mask is not used: a child inherits the mask, and the server must take SIGTERM. Outside the
    main thread no handler can run, so nothing needs holding there."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.held: list[int] = []
        self._previous: dict[int, signal.Handlers | Callable[[int, FrameType | None], Any] | int | None] = {}

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        self.held.append(signum)

    def hold(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                previous = signal.getsignal(signum)
                if previous not in (signal.SIG_IGN, None):  # an ignored signal stays ignored (nohup)
                    self._previous[signum] = signal.signal(signum, self._hold)

    def release(self) -> None:
        """Put the handlers back, then deliver the first signal held (its handler may raise here)."""
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if self.held and self.held[0] in previous:
            signal.raise_signal(self.held[0])
