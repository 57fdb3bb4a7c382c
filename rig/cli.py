"""`rig`: the host CLI. recipe -> render -> build -> boot -> load -> compare -> report."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from types import FrameType

from rig.cli_args import (
    Command,
    OneLineParser,
    add_command,
    amount,
    boot_of_results,
    count,
    counts,
    fingerprint_glob,
    identity,
    size_and_workers,
    url,
    verbose,
    window_seconds,
)
from rig.errors import RigError, StepFailed
from rig.exits import SIGNALLED, Exit, help_text


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

    return run_demo(args.port, verbose=args.verbose)


def _keep_text(args: argparse.Namespace) -> None:
    if args.no_keep_text:
        import os

        from rig.loadrun.runner import KEEP_TEXT_ENV

        os.environ[KEEP_TEXT_ENV] = "0"  # read by every run this command makes


def cmd_loadtest(args: argparse.Namespace) -> int:
    from rig.loadrun.command import loadtest

    _keep_text(args)
    if args.slurm_workers and args.remote_workers:
        raise RigError("command line", "--slurm-workers", "and --remote-workers both name the remote workers",
                       "pass one: --slurm-workers N starts them as a Slurm job, --remote-workers N waits for yours")
    return loadtest(args.recipe, args.scenario, args.small, args.workers, args.duration, args.slurm_workers or args.remote_workers,
                    args.master_bind, url=args.url, model=args.model, boot_id=args.boot_id, flush_cache=args.flush_cache,
                    port=args.port, verbose=args.verbose, slurm_workers=bool(args.slurm_workers))


def cmd_sweep(args: argparse.Namespace) -> int:
    from rig.loadrun.sweep import sweep

    return sweep(args.recipe, args.scenario, args.rates, args.concurrency, args.goodput, args.slo_share, args.small, args.workers,
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
    from rig.compare.imported import import_into

    import_into(Path(args.compare), Path(args.file), args.arm, args.scenario, args.block, Path(args.out) if args.out else None)
    return Exit.OK


def cmd_compare(args: argparse.Namespace) -> int:
    from rig.compare.command import compare, exit_status

    _keep_text(args)
    _, analysis = compare(args.recipe, args.arm, args.control, args.boots, args.rounds, args.scenario, args.small,
                          args.workers, args.resume, duration_s=args.duration, target_pct=args.target,
                          max_boots=args.max_boots, goodput=args.goodput, accept_fingerprint=args.accept_fingerprint,
                          cold_caches=args.cold_caches, burn_in=not args.no_burn_in, port=args.port, driver=args.driver)
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


# ---- each command's arguments, then the registry: `rig NAME` is one entry of COMMANDS ----

RECIPE_HELP = "a recipe name (recipes/<name>.yaml), or name:variant; `rig validate` lists them"


def _recipes_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipes", nargs="*", help="recipe names or .yaml files (default: every recipe in recipes/)")


def _render_arguments(p: argparse.ArgumentParser) -> None:
    _recipes_arguments(p)
    p.add_argument("--check", action="store_true", help="fail if any rendered file is stale (what CI runs)")


def _build_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help="a recipe with an image (a compose recipe, e.g. tiny-cpu-docker)")
    p.add_argument("--allow-unpinned", action="store_true", help="build from a tag whose digest is not pinned")
    p.add_argument("--platform", help="linux/amd64 or linux/arm64 (default: the recipe's)")


def _recipe_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help=RECIPE_HELP)


def _up_arguments(p: argparse.ArgumentParser) -> None:
    _recipe_argument(p)
    p.add_argument("--env", action="append", help="extra environment for the server, KEY=VALUE (repeatable)")
    p.add_argument("--port", type=count(1, 65535), help="the port the server listens on (default: the recipe's serving.port)")
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


def _served_elsewhere(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("recipe", nargs="?", help="recipe[:variant]; optional with --url")
    p.add_argument("--url", type=url, help=f"{what} a server rig did not start (e.g. one from plain `docker compose up`)")
    p.add_argument("--model", type=identity("served model name"),
                   help="with --url: the served model name (default: the first in /v1/models)")


def _window_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=window_seconds, help="override every scenario's measurement window, seconds (at "
                   "least: the window opens at the steady state, which may come before the time planned for it)")


def _no_keep_text_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-keep-text", action="store_true", help="keep no output text in the records (only hashes); "
                   "the coherence checks then have nothing to read")


def _loadtest_arguments(p: argparse.ArgumentParser) -> None:
    _served_elsewhere(p, "measure")
    p.add_argument("--boot-id", type=identity("boot identity"),
                   help="with --url: the server's boot identity, when rig cannot read it from the server")
    p.add_argument("--flush-cache", action="store_true", help="empty the engine's prefix cache before each run")
    p.add_argument("--port", type=count(1, 65535),
                   help="where the boot listens when loadtest starts the recipe (default: the recipe's port)")
    p.add_argument("--scenario", action="append", help="scenario name (repeatable); default: prose-c1, code-c1 and c3000, "
                   "where a run the client cannot measure on this machine is named as skipped instead of failing")
    _window_argument(p)
    p.add_argument("--remote-workers", type=count(0, 4096), default=0,
                   help="distributed scenarios also wait for this many Locust workers on other client machines")
    p.add_argument("--slurm-workers", type=count(0, 4096), default=0, help="distributed scenarios also start this many "
                   "Locust workers as a Slurm job, one per client node (RIG_SLURM_PARTITION, ...)")
    p.add_argument("--master-bind", default="127.0.0.1",
                   help="address the Locust master listens on (remote workers need a reachable one)")
    _no_keep_text_argument(p)


def _sweep_arguments(p: argparse.ArgumentParser) -> None:
    _served_elsewhere(p, "sweep")
    p.add_argument("--scenario", required=True,
                   help="scenario name or .yaml file (open_loop for --rates, a closed loop for --concurrency)")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--rates", help="request rates (req/s) of an open_loop scenario, e.g. 1,2,4,8")
    load.add_argument("--concurrency", help="users of a closed-loop or multi-turn scenario, e.g. 1,4,16,64")
    p.add_argument("--goodput", help="SLOs a request must meet, e.g. ttft<=2s,tpot<=50ms (vLLM's --goodput)")
    p.add_argument("--slo-share", type=amount(0, 1), default=0.9,
                   help="share of requests that must meet the SLOs at the knee (default 0.9)")
    _window_argument(p)


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run directory (holding summary.json and records-*.jsonl)")
    p.add_argument("--format", required=True, choices=["vllm", "aiperf"], help="vLLM's result JSON or AIPerf's profile export")
    p.add_argument("--out", help="directory to write into (default: the run directory)")


def _import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="vLLM `--save-result --save-detailed` JSON, or AIPerf profile_export.jsonl")
    p.add_argument("--scenario", help="the rig scenario it corresponds to (its kind picks the headline; default prose-c1)")
    p.add_argument("--out", help="run directory to create (default: results/imported/<timestamp>/<scenario>)")
    p.add_argument("--compare", help="also add it as a boot of this results/compare/<timestamp> directory (with --arm)")
    p.add_argument("--arm", help="with --compare: the arm the imported run belongs to")
    p.add_argument("--block", type=int, help="with --compare: the ABBA block it pairs with (default: a new block)")


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    from rig.compare.design import DEFAULT_BOOTS, DEFAULT_ROUND_S, DEFAULT_ROUNDS, MAX_PAIRS

    p.add_argument("recipe", help="a recipe name (variants are arms: --arm NAME:@variant)")
    p.add_argument("--arm", action="append", required=True, help="NAME:KEY=VALUE[,..] | NAME:@variant | NAME:image=TAG; "
                   "the first is the baseline; a KEY alone takes its value from rig's environment (for a secret: it then "
                   "never reaches the command line, and no value is written down)")
    p.add_argument("--control", help="an arm known to change greedy output, booted once")
    p.add_argument("--boots", type=count(1, MAX_PAIRS), default=DEFAULT_BOOTS,
                   help=f"boot pairs (boots per arm, ABBA; default {DEFAULT_BOOTS}, from the calibration)")
    p.add_argument("--rounds", type=count(1, MAX_PAIRS), default=DEFAULT_ROUNDS,
                   help=f"measured rounds per boot (default {DEFAULT_ROUNDS})")
    p.add_argument("--target", type=amount(0, 100), help="keep adding boot pairs until every headline 95%% interval is "
                   "within +-TARGET percent (e.g. 1), up to --max-boots")
    p.add_argument("--max-boots", type=count(1, MAX_PAIRS), help="with --target: the most boot pairs to run (default: twice --boots)")
    p.add_argument("--goodput", help="SLOs for goodput, e.g. ttft<=2s,tpot<=50ms (vLLM's --goodput)")
    p.add_argument("--accept-fingerprint", type=fingerprint_glob, action="append", help="a host fingerprint field allowed "
                   "to differ between boots (glob, e.g. 'gpus.*.power_limit_w'); any other condition difference voids the comparison")
    p.add_argument("--scenario", action="append", help="scenario name (repeatable; default prose-c1)")
    p.add_argument("--duration", type=window_seconds, help="every round's measurement window, seconds (default: "
                   f"{DEFAULT_ROUND_S:g} at full sizes, each scenario's own at small sizes)")
    p.add_argument("--resume", help="a results/compare/<timestamp> directory to continue")
    p.add_argument("--cold-caches", action="store_true", help="boot every engine with empty compile/kernel caches of "
                   "its own (boot times then compare like with like; the user's caches are not touched)")
    p.add_argument("--no-burn-in", action="store_true", help="skip the boot-state control: no burn-in boot first, no "
                   "second boot of a measured boot that compiled; states are still recorded and a difference still voids")
    _no_keep_text_argument(p)
    p.add_argument("--port", type=count(1, 65535), help="the port every boot listens on (default: the recipe's "
                   "serving.port); not part of the plan, so a resumed comparison may take another")
    p.add_argument("--driver", choices=["native", "compose", "slurm"], help="the driver every boot uses (default: the "
                   "recipe's own; part of the plan)")


def _audit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help="a recipe name (its model's dimensions and its parallelism)")
    p.add_argument("--model-dir", help="read config.json from this checkpoint instead of the shipped dimensions")
    p.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    p.add_argument("--boot", type=boot_of_results, help="a boot id (results/boots/): hold the derived shapes against what "
                   "that boot's engine allocated on every rank (the gemm_shapes instrument)")


def _kernelbench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=count(1, 1 << 20), default=5120, help="the GEMM's N: output features (default 5120)")
    p.add_argument("--k", type=count(1, 1 << 20), default=576, help="the GEMM's K as the model has it (default 576)")
    p.add_argument("--pad-k", type=count(1, 1 << 20), default=640, help="K zero-padded to this (default 640)")
    p.add_argument("--m", type=counts(1, 1 << 20), default="6", help="comma-separated M values: tokens per call (default 6)")
    p.add_argument("--backends", help="comma-separated backends to time beside the production one (default: all registered)")
    p.add_argument("--production", default="torch-fp8-rowwise", help="the backend serving today, at K (default torch-fp8-rowwise)")
    p.add_argument("--candidate", help="the backend the padding unlocks, at the padded K (e.g. flashinfer-mxfp8-b12x)")
    p.add_argument("--calls-per-step", type=count(1, 10_000), default=1,
                   help="GEMM calls per model step, for the ms-per-step column (default 1)")
    p.add_argument("--rounds", type=count(1, 10_000), default=20, help="interleaved timing rounds (default 20)")
    p.add_argument("--device", help="a torch device (default: cuda when there is one, else cpu)")
    p.add_argument("--out", help="directory for kernelbench.json (default: none written)")


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=count(1, 65535), help="where the demo's boots listen (default: tiny-cpu's port)")


def _adapters_list_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the registry as JSON")


def _adapters_check_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipes", nargs="*", help="recipes whose pinned engine to check (default: every recipe)")
    p.add_argument("--image", help="check inside this built image instead (needs a Docker engine)")


COMMANDS = [
    Command("validate", cmd_validate, "validate recipes (all, or the named ones / files)",
            "Parse and check recipes with the strict loader: every field, every variant, every adapter gate. One line per "
            "recipe; a failure names the file, the field and the fix.",
            ("rig validate", "rig validate tiny-cpu mia-tp4"), _recipes_arguments),
    Command("render", cmd_render, "render docker/<recipe>/Dockerfile, compose/<recipe>.yaml and k8s/<recipe>.yaml",
            "Write each recipe's Dockerfile, compose file and Kubernetes manifests from the recipe (the single source of truth); --check only "
            "says which are stale.",
            ("rig render", "rig render --check"), _render_arguments),
    Command("build", cmd_build, "build a recipe's image (needs a Docker engine)",
            "Build the recipe's image on its digest-pinned engine base, with rig's runtime adapters baked in.",
            ("rig build tiny-cpu-docker",), _build_arguments),
    Command("pin", cmd_pin, "resolve a recipe's base tag to per-platform digests and write them",
            "Ask the registry for the digests of the recipe's base image tag, one per platform, and write them into the "
            "recipe, so that a build is reproducible.",
            ("rig pin tiny-cpu-docker",), _recipe_argument),
    Command("up", cmd_up, "boot a recipe (name[:variant]) and wait until healthy",
            "Boot the recipe's server (its own processes, or its image with Docker Compose), wait until it is healthy, "
            "then check that its adapters armed as the recipe asks.",
            ("rig up tiny-cpu", "rig up tiny-cpu --env RIG_TOKEN_DELAY_MS=4 --port 8400"), _up_arguments),
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
    Command("loadtest", cmd_loadtest, "Locust load test against a recipe's server (boots it if it is not up)",
            "Run Locust scenarios against the recipe's server (booted for the test when nothing is up, and stopped after) "
            "or any OpenAI-compatible server (--url). Each scenario's first run after a boot is its warmup. The output "
            "leads with which runs may be used; the brief table follows; summary.md holds every column and note.",
            ("rig loadtest tiny-cpu", "rig loadtest tiny-cpu --scenario c3000 --duration 30",
             "rig loadtest --url http://127.0.0.1:8000 --scenario prose-c1"),
            _loadtest_arguments, shared=(size_and_workers, verbose)),
    Command("sweep", cmd_sweep, "one scenario at a series of loads: throughput, goodput and latency vs load, and the knee",
            "Run one scenario at each load in turn on one boot and find the knee: the highest load whose requests still "
            "meet the SLOs (--goodput) in the share asked for.",
            ("rig sweep tiny-cpu --scenario prose-c1 --concurrency 1,2,4",
             "rig sweep tiny-cpu --scenario open-loop --rates 1,2,4 --goodput ttft<=2s,tpot<=50ms"),
            _sweep_arguments, shared=(size_and_workers,)),
    Command("export", cmd_export, "a run directory as vLLM's result JSON or AIPerf's profile export, for their dashboards",
            "Write a rig run in another tool's format, so its dashboards can read it.",
            ("rig export results/tiny-cpu/<timestamp>/prose-c1 --format vllm",), _export_arguments),
    Command("import", cmd_import, "a vLLM result JSON or AIPerf profile_export.jsonl as a rig run (provenance marked)",
            "Read another tool's run as a rig run (marked as imported; rig did not check its client), and optionally add "
            "it as a boot of a comparison.",
            ("rig import vllm-result.json --scenario prose-c1",), _import_arguments),
    Command("compare", cmd_compare, "before/after comparison across boots (ABBA, warmup discarded, paired CIs)",
            "Boot each arm in ABBA order, measure each boot's rounds after its warmup, and give the change with its "
            "interval over boot pairs (the boot is the unit of replication), with greedy identity, quality, boot "
            "conditions and the boot-state control beside it. compare.md, compare.json and compare.png hold the report.",
            ("rig compare tiny-cpu --arm off:RIG_TOKEN_DELAY_MS=0 --arm on:RIG_TOKEN_DELAY_MS=4",
             "rig compare tiny-cpu --arm off:RIG_TOKEN_DELAY_MS=0 --arm on:RIG_TOKEN_DELAY_MS=4 --target 5 --max-boots 8",
             "rig compare tiny-cpu --arm off:RIG_TOKEN_DELAY_MS=0 --arm on:RIG_TOKEN_DELAY_MS=4 --resume results/compare/<timestamp>"),
            _compare_arguments, shared=(size_and_workers,)),
    Command("audit", cmd_audit, "GEMM shapes per rank against backend constraints, before any boot",
            "Derive every GEMM shape each rank runs from the recipe's model and parallelism, and hold each against the "
            "constraints of the kernel backends the engine may pick.",
            ("rig audit mia-tp4", "rig audit mia-tp4 --json"), _audit_arguments),
    Command("kernelbench", cmd_kernelbench, "GEMM benchmark: cold L2, CUDA graphs, interleaved rounds, bitwise check",
            "Time one GEMM shape per backend (cold L2, CUDA graphs, interleaved rounds) at K and at the padded K, and "
            "check that the padding is lossless bit for bit. Needs torch (the kernelbench extra).",
            ("rig kernelbench --n 5120 --k 576 --pad-k 640 --m 6 --candidate flashinfer-mxfp8-b12x --calls-per-step 43",),
            _kernelbench_arguments),
    Command("demo", cmd_demo, "boot tiny-cpu, stream a chat, load test, compare until decided, shut down",
            "rig's job end to end on this machine in a few minutes: boot tiny-cpu, stream a chat, run a load test, then "
            "compare token_delay off vs on, whose answer is known (slower), adding boot pairs until the verdict is "
            "decided (3 to 12 pairs). The first and last lines after the run are the verdict; exit 7 when the machine "
            "was too busy to decide.",
            ("rig demo", "rig demo --port 8400 --verbose"), _demo_arguments, shared=(verbose,)),
    Command("adapters", cmd_adapters, "the adapter registry and its drift matrix",
            "The runtime adapters rig can arm in an engine, and whether every hook target still exists in the engine "
            "version a recipe pins.",
            ("rig adapters list", "rig adapters check mia-tp4"),
            subcommands=(
                Command("list", None, "print the registry", "Print every adapter: its gate, its engines and recipes, and "
                        "its hook targets.",
                        ("rig adapters list --json",), _adapters_list_arguments),
                Command("check", None, "verify every hook target against the engine a recipe pins",
                        "Verify every adapter's hook targets statically against the engine source a recipe pins (its "
                        "release wheel, cached), or inside a built image with --image: the drift matrix.",
                        ("rig adapters check mia-tp4",), _adapters_check_arguments),
            )),
]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="rig", description=__doc__, epilog=help_text(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")
    from rig.hosts.command import COMMANDS as HOST_COMMANDS
    from rig.tune.command import COMMANDS as TUNE_COMMANDS

    for command in COMMANDS + HOST_COMMANDS + TUNE_COMMANDS:
        add_command(sub, command)
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
