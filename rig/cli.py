"""`rig`: the host CLI. recipe -> render -> build -> boot -> load -> compare -> report."""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

from rig.errors import RigError, StepFailed
from rig.exits import SIGNALLED, Exit, help_text

Handler = Callable[[argparse.Namespace], int]


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


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled exactly like Ctrl-C: whatever rig started is stopped first."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


# The termination signal rig received, once: a load run catches the interrupt to write what it
# measured, and its callers report "interrupted"; the exit status still says which signal stopped rig
# (a scheduler's preemption is not a Ctrl-C).
_received: list[int] = []


def _terminate(signum: int, frame: FrameType | None) -> None:
    for other in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # the cleanup runs once; SIGKILL still ends rig
        signal.signal(other, signal.SIG_IGN)
    _received.append(signum)
    raise Terminated(signum)


def _hold_interrupts() -> None:
    """rig is stopping: a further Ctrl-C (users press it again) must not cut its last lines or end it
    by the signal itself (exit -2, not 130)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stopped_by_signal() -> int:
    signum = _received[0]
    print(f"rig: stopped by {signal.Signals(signum).name}", file=sys.stderr)
    return SIGNALLED + signum


def _handle_termination() -> None:
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # respect nohup
            signal.signal(signum, _terminate)


def cmd_validate(args: argparse.Namespace) -> int:
    from rig.deploy.recipe import all_recipe_paths, parse_recipe, recipe_path

    failed = 0
    for item in args.recipes or all_recipe_paths():
        try:  # a name that is not a recipe name is one more FAIL line, like a recipe that does not parse
            path = recipe_path(item) if isinstance(item, str) else item
            recipe = parse_recipe(path)
        except RigError as error:
            print(f"FAIL {error}")
            failed += 1
            continue
        note = " (UNPINNED: run `rig pin` before building)" if recipe.image is not None and recipe.image.unpinned else ""
        variants = f" variants: {', '.join(recipe.variants)}" if recipe.variants else ""
        print(f"ok   {path.relative_to(path.parent.parent) if path.parent.name == 'recipes' else path}{variants}{note}")
    return Exit.FAILED if failed else Exit.OK


def cmd_render(args: argparse.Namespace) -> int:
    from rig.deploy.recipe import all_recipe_paths, recipe_path
    from rig.deploy.render import render
    from rig.paths import REPO_ROOT

    paths = [recipe_path(item) for item in args.recipes] or all_recipe_paths()
    changed = render(paths, check=args.check)
    for path in changed:
        print(f"{'stale' if args.check else 'wrote'} {path.relative_to(REPO_ROOT)}")
    if args.check and changed:
        print("rendered files are stale: run `rig render` (or `make render`) and commit the result", file=sys.stderr)
        return Exit.FAILED
    if not changed:
        print("all rendered files are up to date")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from rig.deploy.build import build

    return build(args.recipe, allow_unpinned=args.allow_unpinned, platform=args.platform)


def cmd_pin(args: argparse.Namespace) -> int:
    from rig.deploy.pin import pin

    return pin(args.recipe)


def cmd_up(args: argparse.Namespace) -> int:
    from rig.boot import driver_for
    from rig.boot.checks import check_boot
    from rig.compare.arms import Arm
    from rig.deploy.recipe import load, refuse_inherited_gates
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
    print(f"model: {record.served_model}")
    try:
        result = stream_chat(record.base_url, record.served_model or "", args.prompt, args.max_tokens)
    except (requests.RequestException, ValueError) as error:  # a server that died, answered an error or sent no SSE
        raise StepFailed("server", record.base_url, f"the chat request failed ({type(error).__name__}: {str(error)[:200]})",
                         f"check `rig status` and `rig logs {args.recipe}`") from None
    print(f"({result.chunks} chunks, usage {result.usage}, finish {result.finish_reason}, ttft {result.ttft_s or 0:.3f}s, "
          f"total {result.total_s:.3f}s)")
    if result.finish_reason is None:  # the server closed the stream mid-answer (its worker died, a proxy cut it)
        raise StepFailed("server", record.base_url, f"the stream ended after {result.chunks} chunk(s) without a finish reason "
                         "(the server stopped mid-answer)", f"check `rig status` and `rig logs {args.recipe}`")
    return 0


def cmd_adapters(args: argparse.Namespace) -> int:
    if args.adapters_command == "check":
        from rig.drift import run_check

        return run_check(args.recipes, image=args.image)
    from rig.adapters_table import print_table

    print_table(as_json=args.json)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from rig.demo import run_demo

    return run_demo(args.port)


def _keep_text(args: argparse.Namespace) -> None:
    if args.no_keep_text:
        import os

        from rig.load.runner import KEEP_TEXT_ENV

        os.environ[KEEP_TEXT_ENV] = "0"  # read by every run this command makes


def cmd_loadtest(args: argparse.Namespace) -> int:
    from rig.load.command import loadtest

    _keep_text(args)
    small = True if args.small else (False if args.full else None)
    return loadtest(args.recipe, args.scenario, small, args.workers, args.duration, args.remote_workers, args.master_bind,
                    url=args.url, model=args.model, boot_id=args.boot_id, flush_cache=args.flush_cache, port=args.port)


def cmd_sweep(args: argparse.Namespace) -> int:
    from rig.load.sweep import sweep

    small = True if args.small else (False if args.full else None)
    return sweep(args.recipe, args.scenario, args.rates, args.concurrency, args.goodput, args.slo_share, small, args.workers,
                 args.duration, url=args.url, model=args.model)


def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rig.load.peers import export_run

    for path in export_run(Path(args.run), args.format, Path(args.out) if args.out else None):
        print(f"wrote {path}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rig.load.peers import import_file

    if (args.compare is None) != (args.arm is None) or (args.block is not None and args.compare is None):
        raise RigError("command line", "--compare/--arm/--block", "--compare and --arm go together (--block only with them)",
                       "e.g. --compare results/compare/20261201-101010 --arm before")
    if args.compare is None:
        import_file(Path(args.file), args.scenario, Path(args.out) if args.out else None)
        return Exit.OK
    from rig.compare.imported import comparison_for, join

    plan = comparison_for(Path(args.compare), args.arm, args.scenario)
    imported = import_file(Path(args.file), args.scenario or plan.scenarios[0], Path(args.out) if args.out else None)
    join(Path(args.compare), plan, args.arm, args.block, imported, Path(args.file))
    return Exit.OK


def cmd_compare(args: argparse.Namespace) -> int:
    from rig.compare.command import compare, exit_status

    _keep_text(args)
    small = True if args.small else (False if args.full else None)
    _, analysis = compare(args.recipe, args.arm, args.control, args.boots, args.rounds, args.scenario, small,
                          args.workers, args.resume, duration_s=args.duration, target_pct=args.target,
                          max_boots=args.max_boots, goodput=args.goodput, accept_fingerprint=args.accept_fingerprint,
                          cold_caches=args.cold_caches, burn_in=not args.no_burn_in, port=args.port)
    return exit_status(analysis)


def cmd_kernelbench(args: argparse.Namespace) -> int:
    from pathlib import Path

    try:
        from rig.kernelbench.command import default_backends, kernelbench
    except ImportError as error:  # torch is the kernelbench extra, not part of rig's core
        raise RigError("rig kernelbench", error.name or "torch", "is not installed",
                       "pip install 'rig[kernelbench]' (make setup installs it)") from None

    kernelbench(args.n, args.k, args.pad_k, [int(m) for m in args.m.split(",")],
                args.backends.split(",") if args.backends else default_backends(), args.production, args.candidate,
                args.calls_per_step, args.rounds, Path(args.out) if args.out else None, args.device)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from rig.audit.command import audit

    return audit(args.recipe, args.model_dir, args.json, args.boot)


# ---- argument grammars: a number, a URL or a glob is refused by argparse itself (exit 2, one line) ----

def _count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value
    return parse


def _amount(low: float, high: float) -> Callable[[str], float]:
    """A finite number in (low, high]: never NaN or an infinity."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or not low < value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not a number in ({low:g}, {high:g}]")
        return value
    return parse


def _window_seconds(text: str) -> float:
    """A measurement window's length, in the scenarios' own bounds (rig.load.bounds)."""
    from rig.load.bounds import MAX_DURATION_S, MIN_DURATION_S

    value = _amount(0, MAX_DURATION_S)(text)
    if value < MIN_DURATION_S:
        raise argparse.ArgumentTypeError(f"{text} s is shorter than the shortest window rig measures ({MIN_DURATION_S:g} s)")
    return value


def _url(text: str) -> str:
    """http(s)://host[:port][/path] of a server to measure; anything else is refused before it is dialled."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL ({error})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(ord(c) < 33 or ord(c) == 127 for c in text) \
            or len(text) > 2048 or (port is not None and not 1 <= port <= 65535):
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s)://host[:port] URL")
    return text


def _boot_of_results(text: str) -> str:
    """A boot id as rig writes them (results/boots/<id>): one path component, never a path that leads elsewhere."""
    from rig.boot.record import BOOT_ID

    if not BOOT_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a boot id (like 20261201-135107-llama8b-h200-0b2b; see results/boots/)")
    return text


def _identity(what: str) -> Callable[[str], str]:
    """A name that is recorded and sent as it is (a served model, a server's boot identity): 1-256
    visible characters, no whitespace or control character."""
    def parse(text: str) -> str:
        if not re.fullmatch(r"[!-~]{1,256}", text):
            raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a {what} (1-256 visible ASCII characters, no spaces)")
        return text
    return parse


def _fingerprint_glob(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.*?\[\]-]{1,200}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a fingerprint field or glob (letters, digits, _ . - * ? [ ])")
    return text


def _counts(low: int, high: int) -> Callable[[str], str]:
    """A comma-separated list of whole numbers (kept as the text the handler splits), at most 64 of them."""
    one = _count(low, high)

    def parse(text: str) -> str:
        parts = text.split(",")
        if not 1 <= len(parts) <= 64:
            raise argparse.ArgumentTypeError(f"{len(parts)} values: give 1 to 64")
        for part in parts:
            one(part.strip())
        return text
    return parse


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line, like every other bad input: what was wrong and where the help is."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("rig").strip()  # "rig: loadtest: argument --duration: ...", like every rig error
        self.exit(2, f"rig: {command + ': ' if command else ''}{' '.join(message.split())}; fix: see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    from rig.compare.design import DEFAULT_BOOTS, DEFAULT_ROUND_S, DEFAULT_ROUNDS, MAX_PAIRS
    from rig.load.bounds import MAX_WORKERS

    parser = OneLineParser(prog="rig", description=__doc__, epilog=help_text(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    p = sub.add_parser("validate", help="validate recipes (all, or the named ones / files)")
    p.add_argument("recipes", nargs="*")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("render", help="render docker/<recipe>/Dockerfile and compose/<recipe>.yaml")
    p.add_argument("recipes", nargs="*")
    p.add_argument("--check", action="store_true", help="fail if any rendered file is stale")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("build", help="build a recipe's image (needs a Docker engine)")
    p.add_argument("recipe")
    p.add_argument("--allow-unpinned", action="store_true", help="build from a tag whose digest is not pinned")
    p.add_argument("--platform", help="linux/amd64 or linux/arm64 (default: the recipe's)")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("pin", help="resolve a recipe's base tag to per-platform digests and write them")
    p.add_argument("recipe")
    p.set_defaults(func=cmd_pin)

    p = sub.add_parser("up", help="boot a recipe (name[:variant]) and wait until healthy")
    p.add_argument("recipe", help="a recipe name, or name:variant (`rig validate` lists them with their variants)")
    p.add_argument("--env", action="append", help="extra environment for the server, KEY=VALUE")
    p.add_argument("--port", type=int, help="the port the server listens on (default: the recipe's serving.port)")
    p.add_argument("--driver", choices=["native", "compose"],
                   help="native: the server as processes of this host; compose: the recipe's image with Docker Compose "
                        "(default: the recipe's own driver)")
    p.add_argument("--cold-caches", action="store_true", help="empty compile/kernel caches of this boot's own (the "
                   "user's caches are not touched): a boot that compiles, as a machine's first boot does")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="stop a booted recipe")
    p.add_argument("recipe", help="the recipe name it was booted as (a variant's name:variant works too)")
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("logs", help="print a recipe's boot log")
    p.add_argument("recipe", help="a recipe name: its boot that is up, else its last; name:variant: that variant's")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing as the log grows (Ctrl-C stops)")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("status", help="what rig has up")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("chat", help="stream one chat completion from a booted recipe")
    p.add_argument("recipe")
    p.add_argument("prompt")
    p.add_argument("--max-tokens", type=_count(1, 1 << 20), default=48)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("loadtest", help="Locust load test against a recipe's server (boots it if it is not up)")
    p.add_argument("recipe", nargs="?", help="recipe[:variant]; optional with --url")
    p.add_argument("--url", type=_url, help="measure a server rig did not start (e.g. one from plain `docker compose up`)")
    p.add_argument("--model", type=_identity("served model name"),
                   help="with --url: the served model name (default: the first in /v1/models)")
    p.add_argument("--boot-id", type=_identity("boot identity"), help="with --url: the server's boot identity, when rig cannot read it from the server")
    p.add_argument("--flush-cache", action="store_true", help="empty the engine's prefix cache before each run")
    p.add_argument("--port", type=_count(1, 65535), help="where the boot listens when loadtest starts the recipe (default: the recipe's port)")
    p.add_argument("--scenario", action="append", help="scenario name (repeatable); default prose-c1, code-c1, c3000")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true", help="scaled-down sizes (default for native recipes)")
    size.add_argument("--full", action="store_true", help="full sizes (default for GPU recipes)")
    p.add_argument("--workers", type=_count(1, MAX_WORKERS), help="Locust worker processes for distributed scenarios (default: cores - 1)")
    p.add_argument("--duration", type=_window_seconds, help="override every scenario's measurement window, seconds (at least: the window opens at "
                   "the steady state, which may come before the time planned for it)")
    p.add_argument("--remote-workers", type=_count(0, 4096), default=0,
                   help="distributed scenarios also wait for this many Locust workers on other client machines")
    p.add_argument("--master-bind", default="127.0.0.1", help="address the Locust master listens on (remote workers need a reachable one)")
    p.add_argument("--no-keep-text", action="store_true", help="keep no output text in the records (only hashes); "
                   "the coherence checks then have nothing to read")
    p.set_defaults(func=cmd_loadtest)

    p = sub.add_parser("sweep", help="one scenario at a series of loads: throughput, goodput and latency vs load, and the knee")
    p.add_argument("recipe", nargs="?", help="recipe[:variant]; optional with --url")
    p.add_argument("--scenario", required=True, help="scenario name or .yaml file (open_loop for --rates, a closed loop for --concurrency)")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--rates", help="request rates (req/s) of an open_loop scenario, e.g. 1,2,4,8")
    load.add_argument("--concurrency", help="users of a closed-loop or multi-turn scenario, e.g. 1,4,16,64")
    p.add_argument("--goodput", help="SLOs a request must meet, e.g. ttft<=2s,tpot<=50ms (vLLM's --goodput)")
    p.add_argument("--slo-share", type=_amount(0, 1), default=0.9, help="share of requests that must meet the SLOs at the knee (default 0.9)")
    p.add_argument("--url", type=_url, help="sweep a server rig did not start")
    p.add_argument("--model", type=_identity("served model name"), help="with --url: the served model name")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true", help="scaled-down sizes (default for native recipes)")
    size.add_argument("--full", action="store_true", help="full sizes (default for GPU recipes)")
    p.add_argument("--workers", type=_count(1, MAX_WORKERS), help="Locust worker processes for distributed scenarios (default: cores - 1)")
    p.add_argument("--duration", type=_window_seconds, help="override the scenario's measurement window, seconds (at least, as for loadtest)")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("export", help="a run directory as vLLM's result JSON or AIPerf's profile export, for their dashboards")
    p.add_argument("run", help="a run directory (holding summary.json and records-*.jsonl)")
    p.add_argument("--format", required=True, choices=["vllm", "aiperf"])
    p.add_argument("--out", help="directory to write into (default: the run directory)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import", help="a vLLM result JSON or AIPerf profile_export.jsonl as a rig run (provenance marked)")
    p.add_argument("file", help="vLLM `--save-result --save-detailed` JSON, or AIPerf profile_export.jsonl")
    p.add_argument("--scenario", help="the rig scenario it corresponds to (its kind picks the headline; default prose-c1)")
    p.add_argument("--out", help="run directory to create (default: results/imported/<timestamp>/<scenario>)")
    p.add_argument("--compare", help="also add it as a boot of this results/compare/<timestamp> directory (with --arm)")
    p.add_argument("--arm", help="with --compare: the arm the imported run belongs to")
    p.add_argument("--block", type=int, help="with --compare: the ABBA block it pairs with (default: a new block)")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("compare", help="before/after comparison across boots (ABBA, warmup discarded, paired CIs)")
    p.add_argument("recipe")
    p.add_argument("--arm", action="append", required=True, help="NAME:KEY=VALUE[,..] | NAME:@variant | NAME:image=TAG; a KEY alone takes its value from "
                   "rig's environment (for a secret: it then never reaches the command line, and no value is written down)")
    p.add_argument("--control", help="an arm known to change greedy output, booted once")
    p.add_argument("--boots", type=_count(1, MAX_PAIRS), default=DEFAULT_BOOTS,
                   help=f"boot pairs (boots per arm, ABBA; default {DEFAULT_BOOTS}, from the calibration)")
    p.add_argument("--rounds", type=_count(1, MAX_PAIRS), default=DEFAULT_ROUNDS, help=f"measured rounds per boot (default {DEFAULT_ROUNDS})")
    p.add_argument("--target", type=_amount(0, 100), help="keep adding boot pairs until every headline 95%% interval is within "
                   "+-TARGET percent (e.g. 1), up to --max-boots")
    p.add_argument("--max-boots", type=_count(1, MAX_PAIRS), help="with --target: the most boot pairs to run (default: twice --boots)")
    p.add_argument("--goodput", help="SLOs for goodput, e.g. ttft<=2s,tpot<=50ms (vLLM's --goodput)")
    p.add_argument("--accept-fingerprint", type=_fingerprint_glob, action="append", help="a host fingerprint field allowed to differ between "
                   "boots (glob, e.g. 'gpus.*.power_limit_w'); any other condition difference voids the comparison")
    p.add_argument("--scenario", action="append", help="scenario name (repeatable; default prose-c1)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true", help="scaled-down sizes (default for native recipes)")
    size.add_argument("--full", action="store_true", help="full sizes (default for GPU recipes)")
    p.add_argument("--workers", type=_count(1, MAX_WORKERS), help="Locust worker processes for distributed scenarios (default: cores - 1)")
    p.add_argument("--duration", type=_window_seconds, help="every round's measurement window, seconds (default: "
                   f"{DEFAULT_ROUND_S:g} at full sizes, each scenario's own at small sizes)")
    p.add_argument("--resume", help="a results/compare/<timestamp> directory to continue")
    p.add_argument("--cold-caches", action="store_true", help="boot every engine with empty compile/kernel caches of "
                   "its own (boot times then compare like with like; the user's caches are not touched)")
    p.add_argument("--no-burn-in", action="store_true", help="skip the boot-state control: no burn-in boot first, no "
                   "second boot of a measured boot that compiled; states are still recorded and a difference still voids")
    p.add_argument("--no-keep-text", action="store_true", help="keep no output text in the records (only hashes); "
                   "the coherence checks then have nothing to read")
    p.add_argument("--port", type=int, help="the port every boot listens on (default: the recipe's serving.port); "
                   "not part of the plan, so a resumed comparison may take another")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("audit", help="GEMM shapes per rank against backend constraints, before any boot")
    p.add_argument("recipe")
    p.add_argument("--model-dir", help="read config.json from this checkpoint instead of the shipped dimensions")
    p.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    p.add_argument("--boot", type=_boot_of_results, help="a boot id (results/boots/): hold the derived shapes against what that boot's engine "
                   "allocated on every rank (the gemm_shapes instrument)")
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("kernelbench", help="GEMM benchmark: cold L2, CUDA graphs, interleaved rounds, bitwise check")
    p.add_argument("--n", type=_count(1, 1 << 20), default=5120)
    p.add_argument("--k", type=_count(1, 1 << 20), default=576)
    p.add_argument("--pad-k", type=_count(1, 1 << 20), default=640)
    p.add_argument("--m", type=_counts(1, 1 << 20), default="6", help="comma-separated M values")
    p.add_argument("--backends", help="comma-separated (default: all registered)")
    p.add_argument("--production", default="torch-fp8-rowwise")
    p.add_argument("--candidate", help="the backend the padding unlocks (e.g. flashinfer-mxfp8-b12x)")
    p.add_argument("--calls-per-step", type=_count(1, 10_000), default=1)
    p.add_argument("--rounds", type=_count(1, 10_000), default=20)
    p.add_argument("--device")
    p.add_argument("--out", help="directory for kernelbench.json")
    p.set_defaults(func=cmd_kernelbench)

    p = sub.add_parser("demo", help="boot tiny-cpu, stream a chat, load test, compare, shut down")
    p.add_argument("--port", type=_count(1, 65535), help="where the demo's boots listen (default: tiny-cpu's port)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("adapters", help="the adapter registry and its drift matrix")
    asub = p.add_subparsers(dest="adapters_command", required=True)
    a = asub.add_parser("list", help="print the registry")
    a.add_argument("--json", action="store_true")
    a = asub.add_parser("check", help="verify every hook target against the engine a recipe pins")
    a.add_argument("recipes", nargs="*")
    a.add_argument("--image", help="check inside this built image instead (needs a Docker engine)")
    p.set_defaults(func=cmd_adapters)

    return parser


def installation_problem() -> str | None:
    """rig runs from its checkout (recipes, scenarios, the locustfile and the adapter package live
    there): a copy installed elsewhere (`pip install .` without -e) has none of them."""
    import importlib.util

    from rig.paths import REPO_ROOT

    fix = "install rig editable from its checkout: pip install -e . -e ./adapter (or `make setup`)"
    if not (REPO_ROOT / "recipes").is_dir() or not (REPO_ROOT / "loadtests").is_dir():
        return f"{REPO_ROOT}: no recipes/ or loadtests/ beside the rig package (rig runs from its checkout); fix: {fix}"
    if importlib.util.find_spec("rig_adapters") is None:
        return f"rig_adapters: the adapter package is not installed; fix: {fix}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _received.clear()
    _handle_termination()
    problem = installation_problem()
    if problem:
        print(f"rig: {problem}", file=sys.stderr)
        return Exit.BAD_INPUT
    from rig.boot.base import BootFailed

    try:
        code = args.func(args)
        if code == Exit.INTERRUPTED:
            _hold_interrupts()
        # an interrupt a load run caught and wrote up (its command returns INTERRUPTED): which signal
        return _stopped_by_signal() if code == Exit.INTERRUPTED and _received else code
    except StepFailed as error:
        print(f"rig: {error}", file=sys.stderr)
        return Exit.FAILED
    except RigError as error:
        print(f"rig: {error}", file=sys.stderr)
        return Exit.BAD_INPUT
    except BootFailed as error:  # already one line: what failed and where its log is
        print(f"rig: {error}", file=sys.stderr)
        return Exit.FAILED
    except KeyboardInterrupt:  # Terminated, or an interrupt re-raised after a load run caught it
        _hold_interrupts()
        if _received:
            return _stopped_by_signal()
        print("rig: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    except OSError as error:  # a full disk, a permission, a path that is a file, a connection: one line, no traceback
        where = error.filename if getattr(error, "filename", None) else "(system)"
        problem = error.strerror or str(error) or type(error).__name__
        print(f"rig: {where}: {problem}; fix: free space, fix the permissions or the path, or check the server it names",
              file=sys.stderr)
        return Exit.FAILED


if __name__ == "__main__":
    sys.exit(main())
