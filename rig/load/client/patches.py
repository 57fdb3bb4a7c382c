"""Every change rig's Locust processes make to Locust or urllib3, in one place, each checked against
the library it was written for.

A patch is a row of data (`Patch`: the library and release it was written for, the attribute it
replaces and the parameters it relies on) and a function that applies it, whose docstring says why
it exists. `require_written_for()` checks every row before anything reads a library's internals
(the Locust file calls it first): on another release, or where an attribute is gone or takes other
parameters, the process refuses in one line naming the patch, the version found and the fix,
instead of measuring with a patch that no longer does what its docstring says.

Locust is pinned in pyproject.toml, and its patches name that release exactly. urllib3 is not
pinned (requests accepts any 2.x), so its patches name the major release whose API they use
(`HTTPConnection.is_connected` exists since 2.0) and rely on the attribute checks for the rest.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import select
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rig.errors import Invalid

LOCUST_PIN = "2.47.0"  # pyproject.toml's locust==...
URLLIB3_SERIES = "2"
HERE = "rig/load/client/patches.py"


class PatchMismatch(Invalid):
    """A patch meets a library it was not written for: another release, or an attribute that is gone
    or takes other parameters."""


@dataclass(frozen=True)
class Patch:
    """One change to a dependency: what it replaces and what it was written against."""

    name: str
    library: str  # the top-level module whose __version__ is checked
    written_for: str  # a release ("2.47.0") or a series ("2": any 2.x): dotted parts the version starts with
    owner: str  # "module:Class": the class whose attribute is replaced
    attribute: str
    parameters: tuple[str, ...] | None  # leading parameters the replacement relies on; None: the attribute is a property

    def matches(self, version: str) -> bool:
        wanted = self.written_for.split(".")
        return version.split(".")[: len(wanted)] == wanted

    def target(self) -> Any:
        """The class that holds the attribute (imports its module)."""
        module, _, name = self.owner.partition(":")
        return functools.reduce(getattr, name.split("."), importlib.import_module(module))

    def check(self) -> None:
        """Refuses (PatchMismatch) unless the library is the release this patch was written for and the
        attribute is still what it replaces."""
        version = str(getattr(importlib.import_module(self.library), "__version__", "unknown"))
        if not self.matches(version):
            raise PatchMismatch(HERE, f"patch {self.name}",
                                f"written for {self.library} {self.written_for}, found {self.library} {version}",
                                f"install {self.library}=={LOCUST_PIN if self.library == 'locust' else self.written_for + '.*'} "
                                f"(`pip install -e .`), or re-check {self.owner}.{self.attribute} against {version} and update the patch")
        where = f"{self.owner}.{self.attribute}"
        try:
            found = inspect.getattr_static(self.target(), self.attribute, None)
        except (ImportError, AttributeError):
            found = None
        if self.parameters is None:
            if not isinstance(found, property):
                raise PatchMismatch(HERE, f"patch {self.name}", f"{where} is not a property in {self.library} {version}",
                                    f"re-check the patch against {self.library} {version}")
            return
        if not callable(found):
            raise PatchMismatch(HERE, f"patch {self.name}", f"{where} is missing in {self.library} {version}",
                                f"re-check the patch against {self.library} {version}")
        names = tuple(inspect.signature(found).parameters)[: len(self.parameters)]
        if names != self.parameters:
            raise PatchMismatch(HERE, f"patch {self.name}",
                                f"{where} takes ({', '.join(names)}), not ({', '.join(self.parameters)}), in {self.library} {version}",
                                f"re-check the patch against {self.library} {version}")


SEND_TIME = Patch("send_time", "urllib3", URLLIB3_SERIES, "urllib3.connection:HTTPConnection", "request",
                  ("self", "method", "url", "body", "headers"))
KERNEL_POLL = Patch("kernel_poll", "urllib3", URLLIB3_SERIES, "urllib3.connection:HTTPConnection", "is_connected", None)
WORKER_SPAWNS = Patch("worker_spawns", "locust", LOCUST_PIN, "locust.runners:WorkerRunner", "handle_message", ("self", "msg"))
LOCAL_ROUNDS = Patch("local_rounds", "locust", LOCUST_PIN, "locust.runners:LocalRunner", "spawn_users",
                     ("self", "user_classes_spawn_count", "wait"))
PATCHES = (SEND_TIME, KERNEL_POLL, WORKER_SPAWNS, LOCAL_ROUNDS)


def require_written_for(patches: tuple[Patch, ...] = PATCHES) -> None:
    """Checks every patch; on a mismatch prints its one line and exits 2 (a Locust process must not
    measure with a patch that no longer holds)."""
    for patch in patches:
        try:
            patch.check()
        except PatchMismatch as error:
            print(f"rig: {error}", file=sys.stderr)
            raise SystemExit(2) from None


def _replace(patch: Patch, make: Callable[[Any], Callable[..., Any]]) -> None:
    """Replaces the attribute with make(original) (wrapped in a property where the patch says so).
    Applied again, it replaces the original again rather than wrapping its own replacement."""
    patch.check()
    owner = patch.target()
    current = inspect.getattr_static(owner, patch.attribute)
    function = current.fget if isinstance(current, property) else current
    original = getattr(function, "rig_original", current)
    replacement = make(original)
    replacement.rig_original = original  # type: ignore[attr-defined]
    setattr(owner, patch.attribute, property(replacement) if patch.parameters is None else replacement)


def stamp_send_time(written: dict[int, float]) -> None:
    """Each greenlet's last request's send time: when urllib3 had written the request line, headers
    and body to the socket (wall clock, as the records). urllib3's HTTPConnection.request writes them
    and returns; requests and Locust's HttpSession send through it, HTTPS connections inherit it.
    Stamped before requests built the request, the send time ran ~0.6-0.7 ms early (building it,
    and the turn gevent gives the hub inside urllib3's dropped-connection check), an error TTFT and
    E2E carry on top of the read's."""
    import gevent

    def make(request: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(request)
        def stamped(self: Any, *args: Any, **kwargs: Any) -> None:
            request(self, *args, **kwargs)
            written[id(gevent.getcurrent())] = time.time()
        return stamped

    _replace(SEND_TIME, make)


def poll_the_kernel() -> None:
    """urllib3's is_connected, asked of the kernel. Before it reuses a kept-alive connection urllib3
    polls the socket with a timeout of 0; gevent answers even that from the hub, so the user waits for
    every read its loop's pass has ready before its next request goes out (at 250 streams a process,
    an engine's step of chunks arriving at once: 13 ms a request on an H200 with vLLM, a hold-back of
    each user the aggregate's client bound counts). The kernel's poll with a timeout of 0 never
    blocks. A socket readable while idle was closed by the server (or sent what nobody asked for):
    either way it cannot carry the next request."""
    import gevent.monkey

    kernel_poll = gevent.monkey.get_original("select", "poll")

    def still_open(connection: Any) -> bool:
        if connection.sock is None:
            return False
        poller = kernel_poll()
        poller.register(connection.sock, select.POLLIN)
        return not poller.poll(0)

    _replace(KERNEL_POLL, lambda _original: still_open)


def record_worker_spawns(runner: Any, spawns: list[tuple[float, int]]) -> None:
    """A worker's spawn messages, as the master sent them: (the master's timestamp, the users this
    process was asked for in all). The master paces the spawn and a worker spawns each batch as it
    comes, so a worker's stall holds back the batch it met, not the later ones, whose messages the
    master sends on its own clock (records' t_dispatched; rig.load.client_error). Locust keeps no list
    of them, so this runner's message handler is wrapped; a message of another shape passes
    unrecorded."""
    WORKER_SPAWNS.check()
    handle = runner.handle_message

    def recorded(message: Any) -> None:
        data = message.data if message.type == "spawn" else None
        if isinstance(data, dict) and isinstance(data.get("timestamp"), float) and isinstance(data.get("user_classes_count"), dict):
            spawns.append((data["timestamp"], sum(data["user_classes_count"].values())))
        handle(message)

    runner.handle_message = recorded


def record_local_rounds(runner: Any, spawns: list[tuple[float, int]]) -> None:
    """The local runner's spawn rounds, as this process met them: (when, the users it and the rounds
    before added in all). Locust's local runner paces the spawn on this process's own loop: round k is
    due k waits after the first (rig.load.wire.dispatch_wait), and a wake-up late by however little, a
    stretch the lag monitor saw as a short sample too, delays that round and every later one. Each
    round calls spawn_users once, the rounds that add nobody too; Locust keeps no list of them, so
    this runner's method is wrapped."""
    LOCAL_ROUNDS.check()
    spawn = runner.spawn_users

    def recorded(user_classes_spawn_count: dict[str, int], *args: Any, **kwargs: Any) -> Any:
        spawns.append((time.time(), (spawns[-1][1] if spawns else 0) + sum(user_classes_spawn_count.values())))
        return spawn(user_classes_spawn_count, *args, **kwargs)

    runner.spawn_users = recorded
