"""A series of runs against one boot: the warmup rule (each scenario's first complete run after a
boot is run, kept, marked and left out of results; its state is the boot's runs.jsonl), the
scenarios at their chosen size, prefix-cache flushes, and the server a series is aimed at. The
`rig loadtest`, `rig sweep`, `rig compare` and demo commands all run their load through here."""

from __future__ import annotations

import hashlib
import json
import time
import urllib.parse
from pathlib import Path

from pydantic import ValidationError

from rig import paths
from rig.boot import BootRecord, current_boot, driver_for
from rig.boot.base import BootDriver
from rig.boot.native import NativeDriver
from rig.boot.state import boot_gone
from rig.deploy.recipe import Resolved, load
from rig.engines import CACHE_RESET_WAIT_S, engine
from rig.errors import Damaged, RigError
from rig.grammar import flag_value
from rig.load.bounds import MAX_DURATION_S, MIN_DURATION_S
from rig.load.prompts import TokenCounter
from rig.load.scenarios import Scenario, load_scenario
from rig.load.summary import RunSummary
from rig.load.wire import RUNS_FILE, RunNote, read_lines
from rig.loadrun.runner import LoadTarget, run_scenario
from rig.typed import first_problem

DEFAULT_SCENARIOS = ["prose-c1", "code-c1", "c3000"]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the interrupted run's summary is written; callers stop and report."""

    def __init__(self, summaries: list[RunSummary]) -> None:
        super().__init__("interrupted")
        self.summaries = summaries


def model_dir_for(resolved: Resolved | None) -> str | None:
    """Where the served tokenizer can be read on this host. A recipe whose server_args serve another
    tokenizer than the model's (the engine's tokenizer flag: SGLang's --tokenizer-path, vLLM's
    --tokenizer) is read there when that is a directory of this host (the native driver's paths are;
    a relative one is the server's, whose working directory is the repository root);
    a container's path, or a hub id, cannot be read here: None (the server's /tokenize counts)."""
    if resolved is None:
        return _model_dir_from_environment()
    served = flag_value(resolved.server_args, engine(resolved.recipe.engine.name).tokenizer_flags)
    if served is not None:
        if resolved.recipe.driver != "native" or not served:
            return None
        directory = Path(served) if Path(served).is_absolute() else paths.REPO_ROOT / served  # the native server's cwd
        try:
            return str(directory) if directory.is_dir() else None
        except OSError:  # a directory this user may not enter: the server's /tokenize counts
            return None
    if resolved.recipe.model.source == "generated":
        try:
            return NativeDriver().model_path(resolved)
        except RigError:  # the generator is not installed on this client host: the server's /tokenize counts
            return None
    return _model_dir_from_environment()


def _model_dir_from_environment() -> str | None:
    directory = paths.model_dir()
    return str(directory) if directory is not None else None


def default_small(resolved: Resolved | None) -> bool:
    """Scaled-down scenario sizes for CPU servers (tiny-cpu, natively or as a container)."""
    return resolved is None or not resolved.recipe.gpu


def check_cache_reset(target: LoadTarget) -> None:
    """Before anything runs: the engine's cache-reset route exists on this boot. rig never opens an
    engine's development routes by itself; a recipe (or arm) that wants the reset sets the
    variable the engine registry names, in plain sight."""
    reset = engine(target.engine_name).cache_reset
    if reset is None or not reset.requires_env or target.resolved is None:
        return
    env = {**target.resolved.full_env(), **target.record.overlay}
    missing = {k: v for k, v in reset.requires_env.items() if env.get(k) != v}
    if missing:
        setting = ", ".join(f"{k}={v}" for k, v in missing.items())
        raise RigError("command line", "--flush-cache", f"{target.engine_name} serves {reset.path} only with {setting} "
                       f"({reset.why}); this boot was started without it",
                       f"accept that by adding {setting} to the recipe's env (or the arm), or drop --flush-cache")


def flush_prefix_cache(target: LoadTarget) -> str:
    """POST the engine's cache-reset endpoint (SGLang /flush_cache, vLLM /reset_prefix_cache)."""
    from rig import client

    reset = engine(target.engine_name).cache_reset
    if reset is None:
        return f"{target.engine_name} has no cache-reset endpoint: nothing flushed"
    with client.session() as http:
        response = http.post(target.record.base_url + reset.path, params=reset.params or None, timeout=CACHE_RESET_WAIT_S + 30)
    if response.status_code >= 400:
        needs = "".join(f"; {target.engine_name} registers it only with {k}={v} ({reset.why})"
                        for k, v in reset.requires_env.items()) if response.status_code == 404 else ""
        if response.status_code == 400 and reset.busy:
            needs = f" ({' '.join(response.text.split())[:200]}): {reset.busy}"
        raise RigError("command line", "--flush-cache", f"POST {reset.path} answered {response.status_code}{needs}",
                       "start the server with its cache-reset endpoint enabled, or drop --flush-cache")
    return f"prefix cache flushed ({reset.path})"


def scenarios_for(names: list[str], small: bool, duration_s: float | None = None) -> list[Scenario]:
    """The named scenarios at the chosen size, each validated (with its data files) before anything
    boots or is written; a --duration override is held to the same bounds as the file."""
    scenarios = [load_scenario(name).scaled(small) for name in names]
    if duration_s is None:
        return scenarios
    try:
        return [s.with_changes(duration_s=float(duration_s)) for s in scenarios]
    except ValidationError as error:
        field, message = first_problem(error)
        raise RigError("command line", "--duration", message, f"pass a number of seconds from {MIN_DURATION_S:g} to {MAX_DURATION_S:g}") from None


def run_scenarios(target: LoadTarget, names: list[str], small: bool, workers: int | None, root: Path,
                  progress: bool = True, warmup: bool = True, duration_s: float | None = None,
                  remote_workers: int = 0, master_bind: str = "127.0.0.1", flush_cache: bool = False,
                  slurm_workers: bool = False) -> list[RunSummary]:
    """The warmup rule lives here: each scenario's first complete run after a boot is run, kept,
    marked and left out of results; the measured run waits for the steady state its warmup timed."""
    scenarios = scenarios_for(names, small, duration_s)
    if flush_cache:
        check_cache_reset(target)
    counter = TokenCounter(target.model_dir, target.record.base_url, target.record.served_model)
    summaries: list[RunSummary] = []
    for scenario in scenarios:
        passes = ([True] if warmup and warmup_pending(target.record, scenario) else []) + [False]
        for is_warmup in passes:
            out = root / (f"warmup-{scenario.name}" if is_warmup else scenario.name)
            if flush_cache:
                note = flush_prefix_cache(target)
                if progress:
                    print(f"{scenario.name}: {note}")
            summary = run_scenario(target, scenario, out, workers, counter, warmup=is_warmup, progress=progress,
                                   remote_workers=remote_workers if scenario.distributed else 0, master_bind=master_bind,
                                   settle_s=settle_estimate(target.record, scenario), slurm_workers=slurm_workers)
            note_run(target.record, out, summary, scenario)
            summaries.append(summary)
            if summary.interrupted:
                raise Interrupted(summaries)
    return summaries


def acquire_target(ref: str | None, url: str | None = None, model: str | None = None,
                   boot_id: str | None = None, port: int | None = None) -> tuple[LoadTarget, BootDriver | None]:
    """The server to measure: with `url` one rig did not start; else the recipe's current boot, or
    a new boot on `port` (default: the recipe's; then the driver is returned: the caller brings it down)."""
    if port is not None and url:
        raise RigError("command line", "--port", "is where rig boots the recipe; --url names a server that is already up",
                       "drop --port (the URL holds the port)")
    driver = None
    engine_name = None
    resolved: Resolved | None
    if url:
        from rig.loadrun.attach import attach

        resolved, record, engine_name = attach(url, ref, model, boot_id)
        print(f"attached to {record.base_url}: {engine_name} server, model {record.served_model}, "
              f"boot {record.boot_id} ({record.image.identity})")
    else:
        if ref is None:
            raise RigError("command line", "recipe", "no recipe and no --url", "name a recipe, or pass --url URL")
        resolved = load(ref)
        current: BootRecord | None = current_boot(resolved.recipe.name)
        if current is None:
            driver = driver_for(resolved)
            record = driver.up(resolved, port=port)
        else:
            record = current
            gone = boot_gone(record)
            if gone:  # its process exited: every request would fail, and the run would say only that
                raise RigError(f"boot {record.boot_id}", "state", f"{record.ref} is down ({gone}): there is no server to measure",
                               f"`rig down {resolved.recipe.name}` clears its state; then `rig loadtest {ref}` boots it again")
            if port is not None and urllib.parse.urlsplit(record.base_url).port != port:
                raise RigError("command line", "--port", f"{record.ref} is already up at {record.base_url}; --port only "
                               "places a boot that loadtest starts", f"drop --port, or `rig down {resolved.recipe.name}` first")
            if record.ref != resolved.ref and ":" in ref:  # another variant is up: measuring it would be measuring the wrong thing
                raise RigError("command line", "recipe", f"{record.ref} is up (boot {record.boot_id}), not {resolved.ref}",
                               f"`rig loadtest {record.ref}` measures it; `rig down {resolved.recipe.name}` first to boot {resolved.ref}")
            if record.ref != resolved.ref:  # the recipe named bare: its boot, whichever variant, as it runs
                resolved = load(record.ref)
    return LoadTarget(resolved, record, model_dir_for(resolved), engine_name), driver


def boot_runs(record: BootRecord) -> list[RunNote]:
    """The runs made against a boot so far (its runs.jsonl), oldest first. A damaged log is refused in
    one line whose fix fits a boot's log: it holds the warmup rule's state, so a guess could measure
    a warmup or skip one."""
    try:
        return list(read_lines(Path(record.boot_dir) / RUNS_FILE, RunNote))
    except Damaged as error:
        raise Damaged(error.where, error.field, error.problem, f"boot {record.ref} again (`rig down {record.recipe}`, then "
                      "`rig up` or `rig loadtest`): a new boot starts a new log of its runs") from None


def workload_key(scenario: Scenario) -> str:
    """What a warmup primes, as one digest: the scenario at the size it runs (users, lengths,
    arrivals, ...), its measured duration aside. The same name at another size (--small, --full, a
    sweep's point, an edited file) is another workload: its batch shapes are new to the engine."""
    shapes = scenario.model_dump(mode="json", by_alias=True, exclude={"duration_s"})
    return hashlib.sha256(json.dumps(shapes, sort_keys=True).encode()).hexdigest()[:16]


def warmup_pending(record: BootRecord, scenario: Scenario) -> bool:
    """Each workload's first complete run after a boot is its warmup (new batch shapes, autotuning,
    graph captures). An interrupted warmup does not count; nor does one of the same scenario at
    another size (workload_key), or one noted before runs were keyed so."""
    key = workload_key(scenario)
    return not any(run.warmup and run.complete and run.workload == key for run in boot_runs(record))


def settle_estimate(record: BootRecord, scenario: Scenario) -> float:
    """Seconds to a steady state measured by this boot's last run of the workload: the last user's
    first token plus one request lifetime; else by its last run of the scenario at any size (a
    sweep's points: its heaviest warmed them up); 0 before any."""
    runs = [run for run in reversed(boot_runs(record)) if run.settle_s is not None]
    key = workload_key(scenario)
    for run in [r for r in runs if r.workload == key] + [r for r in runs if r.scenario == scenario.name]:
        return run.settle_s  # type: ignore[return-value]
    return 0.0


def note_run(record: BootRecord, out_dir: Path, summary: RunSummary, scenario: Scenario) -> None:
    window = summary.metrics.window
    note = RunNote(dir=str(out_dir), scenario=scenario.name, warmup=summary.warmup, complete=not summary.interrupted,
                   settle_s=window.start - window.run_start if window.steady else None, time=time.time(),
                   workload=workload_key(scenario))
    Path(record.boot_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(record.boot_dir) / RUNS_FILE, "ab+") as handle:
        # A note cut by a kill mid-write ends without its newline: start on a line of our own, so
        # the cut one stays alone (skipped when read) and this one is whole.
        cut = handle.seek(0, 2) > 0 and (handle.seek(-1, 2), handle.read(1))[1] != b"\n"
        handle.write((b"\n" if cut else b"") + note.json_text(indent=None).encode() + b"\n")
