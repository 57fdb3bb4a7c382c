"""Which boot of a recipe is up: the state file each boot claims exclusively (one `rig up` of a
recipe at a time), remembers while it runs and releases only if it is still its own."""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from rig import grammar, paths
from rig.atomic import write_text_atomic
from rig.boot.base import DRIVERS, BootFailed, driver_named
from rig.boot.record import BOOT_ID, BootRecord
from rig.deploy.recipe import Resolved
from rig.deploy.recipe_owned import check_overlay
from rig.errors import RigError
from rig.redaction import redact_for

# Who started the boots made in this context, where it was not `rig up` (a comparison or a race
# boots and stops its own): a `rig up` that finds such a boot up names it instead of advising
# `rig down`, which would cut the comparison's load mid-round.
_OWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar("boot_owner", default=None)


@contextlib.contextmanager
def boots_owned_by(owner: str) -> Iterator[None]:
    token = _OWNER.set(owner)
    try:
        yield
    finally:
        _OWNER.reset(token)


def new_boot(resolved: Resolved, driver: str, overlay: dict[str, str], port: int) -> BootRecord:
    """A new boot record; refused while the recipe's recorded server is still up. The overlay is
    checked like a variant's env (no rig-owned name, no loader hook) and recorded redacted
    (rig/redaction.py): the driver hands the real values to the server."""
    check_overlay(resolved, overlay, "command line", "--env")
    refuse_if_up(resolved.recipe.name)
    boot_id = time.strftime("%Y%m%d-%H%M%S") + f"-{resolved.slug}-{secrets.token_hex(2)}"
    boot_dir = paths.boots_dir() / boot_id
    (boot_dir / "manifests").mkdir(parents=True, exist_ok=True)
    record = BootRecord(
        boot_id=boot_id, ref=resolved.ref, recipe=resolved.recipe.name, variant=resolved.variant, driver=driver,
        base_url=f"http://{_client_host(resolved.recipe.serving.bind)}:{port}", boot_dir=str(boot_dir),
        log_path=str(boot_dir / "server.log"), manifest_dir=str(boot_dir / "manifests"),
        overlay=redact_for(resolved, overlay), started=time.time(), owner=_OWNER.get(),
    )
    claim(record)
    return record


# A claim without a server (its `rig up` is still preparing: the model, the adapter overlay) counts
# as starting for this long; older, its `rig up` died before starting anything and the claim is stale.
CLAIM_STALE_S = 600.0


def claim(record: BootRecord) -> None:
    """Create the recipe's state file, or refuse: two `rig up` of one recipe started at the same
    moment both pass the liveness check, and the later one's cleanup would otherwise delete the
    earlier one's state and orphan its server. Written whole, then linked in place (link refuses an
    existing name), so readers never see half a record and exactly one claim wins."""
    path = state_path(record.recipe)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{record.boot_id}")
    staging.write_text(record.model_dump_json(indent=1))
    try:
        os.link(staging, path)
    except FileExistsError:
        raise RigError(f"recipes/{record.recipe}.yaml", "(boot)", "another `rig up` of this recipe is starting or up",
                       f"wait for it (`rig status`), or stop it with `rig down {record.recipe}`") from None
    finally:
        staging.unlink(missing_ok=True)


def boot_gone(record: BootRecord) -> str | None:
    """Why the recorded boot's server is no longer running (its driver's own check), or None while it
    runs or still boots: what `rig status` shows and `rig loadtest` refuses to measure."""
    try:
        return driver_named(record.driver).alive(record)
    except (BootFailed, RigError) as error:  # e.g. a compose record whose container was removed
        return str(error.problem if isinstance(error, RigError) else error)


def scheduler_ended(record: BootRecord) -> str | None:
    """The scheduler's state and reason when it ended the boot's job without rig asking (a time
    limit, a node failure, a cancel from outside), for a driver whose boots are scheduler jobs;
    None while the job runs, and always for other drivers (their servers end only by rig's hand
    or by a crash, which is the engine's, not the nodes')."""
    if record.driver not in DRIVERS:  # a server attached by URL: no job of rig's
        return None
    preempted = getattr(driver_named(record.driver), "preempted", None)
    return preempted(record) if preempted is not None else None


def refuse_if_up(recipe_name: str) -> None:
    """`rig up` while the recorded server of this recipe is alive would orphan it: refuse. A state
    file whose server is gone (or whose pid now names another process) is reported and removed."""
    record = current_boot(recipe_name)
    if record is None:
        return
    if record.status == "booting" and record.pid is None and record.compose_project is None \
            and time.time() - record.started < CLAIM_STALE_S:
        raise RigError(f"recipes/{recipe_name}.yaml", "(boot)", f"boot {record.boot_id} of this recipe is starting "
                       "(another `rig up` claimed it moments ago)", "wait for it (`rig status`) or stop it with "
                       f"`rig down {recipe_name}`")
    gone = driver_named(record.driver).alive(record)
    if gone is None and record.owner:
        raise RigError(f"recipes/{recipe_name}.yaml", "(boot)", f"boot {record.boot_id} of this recipe is up at {record.base_url} "
                       f"for {record.owner}", "wait until it ends (it stops its own boots), or stop it with Ctrl-C where it "
                       "runs; `rig down` would cut its load mid-round")
    if gone is None:
        raise RigError(f"recipes/{recipe_name}.yaml", "(boot)", f"boot {record.boot_id} of this recipe is still up at {record.base_url}",
                       f"stop it first with `rig down {recipe_name}`")
    print(f"rig: removing the stale state of boot {record.boot_id} ({gone})", file=sys.stderr)
    state_path(recipe_name).unlink(missing_ok=True)


def refuse_if_port_taken(resolved: Resolved, port: int | None) -> None:
    """A boot whose port something else already listens on would fail after its claim; refused in
    one line, before anything is written (`rig up`, and `rig compare` before its first boot)."""
    import socket

    serving = resolved.recipe.serving
    port = port or serving.port
    family = socket.AF_INET6 if ":" in serving.bind else socket.AF_INET  # serving.bind is an IPv4 or IPv6 address
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed connection's TIME-WAIT is no holder
        try:
            probe.bind((serving.bind, port))
        except OSError as error:
            where = f"recipes/{resolved.recipe.name}.yaml"
            if error.errno == errno.EADDRNOTAVAIL:
                raise RigError(where, "serving.bind", f"{serving.bind} is not an address of this host",
                               "bind an address this host has (127.0.0.1 for this host only)") from None
            if error.errno != errno.EADDRINUSE:
                raise RigError(where, "serving.port", f"port {port} on {serving.bind} cannot be bound ({error.strerror})",
                               "choose a port this user may bind (--port)") from None
            holder = current_boot(resolved.recipe.name)
            ours = (f"`rig down {holder.ref}`" if holder is not None and urlsplit(holder.base_url).port == port else
                    "`rig status` lists rig's boots; else a container (`docker ps`) or another process")
            raise RigError(where, "serving.port", f"port {port} on {serving.bind} is already in use",
                           f"stop what uses it ({ours}; `ss -ltnp 'sport = :{port}'`) or pass a free one with --port N "
                           "(rig up, loadtest, compare, demo; make demo PORT=N)") from None


def _client_host(bind: str) -> str:
    if bind in ("0.0.0.0", "::", ""):  # noqa: S104 - mapping a wildcard bind to loopback
        return "127.0.0.1"
    return f"[{bind}]" if ":" in bind else bind


def state_path(recipe_name: str) -> Path:
    """A recipe's state file; the name is checked here, so no caller can walk out of the state directory."""
    if not grammar.is_recipe_name(recipe_name):
        raise RigError("command line", "recipe", f"{recipe_name!r} is not a recipe name",
                       "pass a name from `rig validate` (lowercase letters, digits, -)")
    return paths.state_dir() / f"{recipe_name}.json"


ANY_VARIANT = object()


def boots_of(recipe_name: str, variant: str | None | object = ANY_VARIANT) -> list[Path]:
    """The boot.json of every boot of `recipe_name` (any variant, or only `variant`'s: None is the
    recipe without one), oldest first; `a` never matches the boots of `a-b`."""
    state_path(recipe_name)  # the name's grammar
    found = []
    for path in paths.boots_dir().glob("*/boot.json"):
        match = BOOT_ID.fullmatch(path.parent.name)
        if match and match.group("recipe") == recipe_name and (variant is ANY_VARIANT or match.group("variant") == variant):
            found.append(path)
    return sorted(found, key=lambda path: path.parent.name)


def current_boot(recipe_name: str) -> BootRecord | None:
    path = state_path(recipe_name)
    return BootRecord.load(path) if path.exists() else None


def remember(record: BootRecord) -> None:
    write_text_atomic(state_path(record.recipe), record.model_dump_json(indent=1))
    record.save()


def forget(record: BootRecord) -> None:
    """Release the recipe's state, only if it is still this boot's (another boot may hold it now)."""
    path = state_path(record.recipe)
    try:
        import json

        current = json.loads(path.read_text()).get("boot_id")
    except (OSError, ValueError, AttributeError):
        current = None
    if current == record.boot_id:
        path.unlink(missing_ok=True)
    record.save()
