"""`rig up`, `rig down`, `rig logs`, `rig status` and `rig chat`: a recipe's server on this machine."""

from __future__ import annotations

import argparse
import os
import sys

from rig.cli_args import (
    Command,
    boot_port,
    count,
    recipe_argument,
)
from rig.errors import RigError, StepFailed
from rig.exits import Exit


def _env_pairs(pairs: list[str] | None) -> dict[str, str]:
    from rig import grammar

    env = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not key:
            raise RigError("command line", "--env", f"{pair[:80]!r} names no variable before its '='", "write --env NAME=value")
        if not sep:
            raise RigError("command line", "--env", f"{key!r} is not followed by =VALUE", "write --env NAME=value")
        try:
            grammar.env_key(key)
        except ValueError as error:
            raise RigError("command line", "--env", str(error), "write --env NAME=value") from None
        if grammar.control_character(value):
            raise RigError("command line", f"--env {key}", "the value contains a control character", "pass a one-line value")
        env[key] = value
    return env


def cmd_up(args: argparse.Namespace) -> int:
    from rig.boot import driver_for
    from rig.boot.checks import check_boot
    from rig.compare.arms import Arm
    from rig.deploy.recipe import load
    from rig.deploy.recipe_owned import refuse_inherited_gates
    from rig.grammar import IMAGE_TAG_VARIABLE

    resolved = load(args.recipe)
    if args.port is not None and not 1 <= args.port <= 65535:
        raise RigError("command line", "--port", f"{args.port} is not a TCP port", "pass a port from 1 to 65535")
    overlay = _env_pairs(args.env)
    # The overlay checked and resolved as an arm is: a gate in it enables its adapter, so a value that
    # can never arm is refused before the boot, and the boot check expects the adapter ARMED (as
    # compare does); the image tag is compose's, as an arm's image= is.
    env = {key: value for key, value in overlay.items() if key != IMAGE_TAG_VARIABLE}
    as_run = (Arm(name="up", variant=resolved.variant, env=env, image_tag=overlay.get(IMAGE_TAG_VARIABLE))
              .resolve(resolved.recipe.name, "--env") if overlay else resolved)
    refuse_inherited_gates(resolved, overlay, os.environ)  # the user's input before the machine's state (the port)
    record = driver_for(resolved, args.driver).up(resolved, overlay, port=args.port, cold_caches=args.cold_caches)
    check = check_boot(record, as_run)
    print(f"{record.ref} up: {record.base_url} model={record.served_model} boot={record.boot_id} "
          f"healthy after {record.healthy_after_s:.1f}s")
    for problem in check.problems:
        print(f"boot check: {problem}")
    return Exit.OK if check.ok else Exit.BOOT_CHECK


def _running(recipe_name: str, required: bool = True):
    """The recipe's current boot; None (when not `required`) or a refusal when nothing of it is up."""
    from rig.boot import current_boot

    record = current_boot(recipe_name)
    if record is None:
        from rig.deploy.recipe import parse_recipe, recipe_path

        if not recipe_path(recipe_name).exists():  # a misspelled name: say so (did you mean ...?), not "start it"
            parse_recipe(recipe_path(recipe_name))
        if required:
            raise RigError(f"recipes/{recipe_name}.yaml", "(boot)", "nothing of this recipe is up",
                           f"start it with `rig up {recipe_name}`")
    return record


def cmd_down(args: argparse.Namespace) -> int:
    from rig.boot import driver_named
    from rig.deploy.recipe import parse_ref

    name = parse_ref(args.recipe)[0]
    record = _running(name, required=False)
    if record is None:  # down is idempotent, as `docker compose down` is
        print(f"{name}: nothing is up, nothing to stop")
        return 0
    driver_named(record.driver).down(record)
    if record.not_signalled is not None:
        print(f"{record.ref}: removed the stale state of boot {record.boot_id}; nothing was signalled ({record.error})")
        return 0
    print(f"{record.ref} down (boot {record.boot_id}; log kept in {record.boot_dir})")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    import os as os_module
    import time
    from pathlib import Path

    from rig import paths as rig_paths
    from rig.boot.record import BootRecord
    from rig.boot.state import ANY_VARIANT, boots_of
    from rig.deploy.recipe import parse_ref
    from rig.errors import NotFound
    from rig.strict_yaml import open_inside

    name, variant = parse_ref(args.recipe)
    try:
        record = _running(name)
    except RigError:
        if not boots_of(name):
            raise
        record = None
    # recipe:variant is that variant's boot: the one up, else its last; the bare name is the recipe's, any variant
    up = record is not None and (variant is None or record.variant == variant)
    if not up:
        boots = boots_of(name, ANY_VARIANT if variant is None else variant)
        if not boots:
            raise NotFound(str(rig_paths.boots_dir()), "(boot)", f"{args.recipe} has never been started here",
                           f"start it with `rig up {args.recipe}`; `rig status` lists what is up")
        record = BootRecord.load(boots[-1])

    try:  # a regular file inside the boot's own directory: never a FIFO, a device or a link elsewhere
        descriptor = open_inside(Path(record.log_path), Path(record.boot_dir))
    except NotFound:
        raise NotFound(record.log_path, "(file)", f"boot {record.boot_id} has no server log (never started, or cleaned up)",
                       f"read {record.boot_dir}/boot.json for its status and error") from None
    os_module.set_blocking(descriptor, True)
    if not up:  # say whose log this is, on stderr (stdout stays the log itself)
        print(f"rig: {args.recipe} is not up; the log of its last boot, {record.boot_id} (its record says {record.status}; "
              "not running now):", file=sys.stderr)
    with open(descriptor, errors="replace", closefd=True) as handle:
        sys.stdout.write(handle.read())
        while args.follow:
            line = handle.readline()
            if line:
                sys.stdout.write(line)
            else:
                time.sleep(0.2)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from rig import paths as rig_paths
    from rig.boot.health import unhealthy
    from rig.boot.record import BootRecord
    from rig.boot.state import boot_gone

    paths = sorted(rig_paths.state_dir().glob("*.json"))
    if not paths:
        print("nothing is up")
    broken = 0
    for path in paths:
        try:
            record = BootRecord.load(path)
        except RigError as error:  # one unreadable state must not hide the others
            print(f"BROKEN {error}")
            broken += 1
            continue
        gone = boot_gone(record)
        sick = None
        if not gone and record.status != "booting":  # a boot still starting has no health yet: `rig up` waits for it
            try:
                sick = unhealthy(record, _health_path(record.recipe))
            except RigError as error:  # e.g. a malformed RIG_API_KEY: the list still prints, unprobed
                print(f"{record.ref}: health not probed ({error.problem})")
        broken += bool(sick) or bool(gone)  # a server that died without `rig down` is a failure too
        state = (f"DOWN ({gone}; `rig logs {record.ref}` says why, `rig down {record.ref}` clears it)" if gone
                 else "booting" if record.status == "booting"
                 else f"UNHEALTHY ({sick}; `rig logs {record.recipe}` says why)" if sick else "up")
        print(f"{record.ref:22} {record.driver:8} {record.base_url:28} {state}  boot {record.boot_id}")
    return Exit.FAILED if broken else Exit.OK


def _health_path(recipe_name: str) -> str:
    """The recipe's health endpoint; /health where the recipe no longer reads (edited since the boot)."""
    from rig.deploy.recipe import load

    try:
        return load(recipe_name).recipe.serving.health
    except RigError:
        return "/health"


def cmd_chat(args: argparse.Namespace) -> int:
    import requests

    from rig.chat import stream_chat
    from rig.deploy.recipe import parse_ref

    name, variant = parse_ref(args.recipe)
    record = _running(name)
    if variant is not None and record.ref != args.recipe:
        raise RigError("command line", "recipe", f"{record.ref} is up, not {args.recipe}",
                       f"chat with {record.ref}, or `rig down {name}` and `rig up {args.recipe}`")
    if record.status == "booting":  # a `rig up` or a comparison's boot, not yet healthy: nothing to ask yet
        raise RigError("command line", "recipe", f"boot {record.boot_id} of {name} is {record.status}, not healthy yet",
                       "wait until `rig status` says it is up, then chat again")
    print(f"model: {record.served_model}")
    try:
        result = stream_chat(record.base_url, record.served_model or "", args.prompt, args.max_tokens)
    except requests.ConnectionError:  # the server went away between the state check and the request
        raise StepFailed("server", record.base_url, "nothing answers there (the connection was refused or dropped)",
                         f"check `rig status` and `rig logs {args.recipe}`") from None
    except (requests.RequestException, ValueError) as error:  # a server that died, answered an error or sent no SSE
        raise StepFailed("server", record.base_url, f"the chat request failed ({type(error).__name__}: {str(error)[:200]})",
                         f"check `rig status` and `rig logs {args.recipe}`") from None
    print(f"({result.chunks} chunks, usage {result.usage}, finish {result.finish_reason}, ttft {result.ttft_s or 0:.3f}s, "
          f"total {result.total_s:.3f}s)")
    if result.finish_reason is None:  # the server closed the stream mid-answer (its worker died, a proxy cut it)
        raise StepFailed("server", record.base_url, f"the stream ended after {result.chunks} chunk(s) without a finish reason "
                         "(the server stopped mid-answer)", f"check `rig status` and `rig logs {args.recipe}`")
    return 0


def _up_arguments(p: argparse.ArgumentParser) -> None:
    recipe_argument(p)
    p.add_argument("--env", action="append", help="extra environment for the server, KEY=VALUE (repeatable)")
    p.add_argument("--driver", choices=["native", "compose", "slurm"],
                   help="native: the server as processes of this host; compose: the recipe's image with Docker Compose; "
                        "slurm: a Slurm job, the engine started with srun on its nodes (default: the recipe's own driver)")
    p.add_argument("--cold-caches", action="store_true", help="empty compile/kernel caches of this boot's own (the "
                   "user's caches are not touched): a boot that compiles, as a machine's first boot does")


def _down_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help="the recipe name it was booted as (a variant's name:variant works too)")


def _logs_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help="a recipe name: its boot that is up, else its last; name:variant: that variant's")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing as the log grows (Ctrl-C stops)")


def _chat_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help="a recipe that is up (`rig status` lists them)")
    p.add_argument("prompt", help="the user message (quote it)")
    p.add_argument("--max-tokens", type=count(1, 1 << 20), default=48, help="the most tokens to generate (default 48)")


COMMANDS = [
    Command("up", cmd_up, "boot a recipe (name[:variant]) and wait until healthy",
            "Boot the recipe's server (its own processes, or its image with Docker Compose), wait until it is healthy, "
            "then check that its adapters armed as the recipe asks.",
            ("rig up tiny-cpu", "rig up tiny-cpu --env RIG_TOKEN_DELAY_MS=4 --port 8400"), _up_arguments, shared=(boot_port,)),
    Command("down", cmd_down, "stop a booted recipe",
            "Stop the recipe's server and remove its state; its boot log stays. Nothing up is not an error.",
            ("rig down tiny-cpu",), _down_arguments),
    Command("logs", cmd_logs, "print a recipe's boot log",
            "Print the server log of the recipe's boot that is up, or of its last boot.", ("rig logs tiny-cpu -f",),
            _logs_arguments),
    Command("status", cmd_status, "what rig has up",
            "List every boot rig has up with its URL and health; exit 1 when one is unhealthy or died without `rig down`.",
            ("rig status",)),
    Command("chat", cmd_chat, "stream one chat completion from a booted recipe",
            "Send one chat message to the recipe's server and stream the answer.", ('rig chat tiny-cpu "Say hello"',),
            _chat_arguments),
]
