"""Arms the gated adapters in this process, before the code they patch first runs.

Three paths lead here and all are idempotent: the `rig_adapters.pth` file (every interpreter
start: API server, scheduler, spawned TP workers), vLLM's `vllm.general_plugins` and SGLang's
`sglang.srt.plugins` entry points. Forked workers inherit the armed patches.

Targets are patched the moment their module finishes executing (an import hook), so a
`functools.partial` that an engine binds at model construction already holds the wrapper.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import importlib.abc
import importlib.machinery
import inspect
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from rig_adapters import __version__
from rig_adapters.gates import env_gate
from rig_adapters.registry import REGISTRY, AdapterSpec, Target, install_order

MANIFEST_DIR_ENV = "RIG_ADAPTER_MANIFEST_DIR"
ENGINE_ENV = "RIG_ENGINE"  # the engine this process belongs to, set by rig's boot drivers
MANIFEST_SCHEMA = 1
WRAPPER_MARK = "__rig_adapter__"

logger = logging.getLogger("rig_adapters")


class Refused(Exception):
    """The adapter cannot arm here; the message says why. It is logged and recorded, and the
    engine runs unpatched for this adapter (boot checks turn that into a voided boot)."""


class Redundant(Refused):
    """Upstream already does what the adapter does; arming would only add risk."""


def _ensure_log_handler() -> None:
    if not any(getattr(h, "_rig", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s rig_adapters[%(process)d] %(levelname)s %(message)s"))
        handler._rig = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


class Manifest:
    """Per-process evidence, rewritten atomically on every change: what armed, what refused
    and why, layers patched, shapes rejected. Boot checks and comparisons read it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data: dict[str, Any] = {}
        self.reset_for_process(inherited=False)

    def reset_for_process(self, inherited: bool) -> None:
        adapters = self.data.get("adapters", {}) if inherited else {}
        self.data = {
            "schema": MANIFEST_SCHEMA,
            "rig_adapters_version": __version__,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "argv": list(sys.argv)[:8],
            "started": time.time(),
            "inherited_from_fork": inherited,
            "adapters": adapters,
        }
        if inherited and adapters:
            self.write()

    def adapter(self, spec: AdapterSpec) -> dict[str, Any]:
        return self.data["adapters"].setdefault(
            spec.name,
            {
                "state": "pending",
                "reason": None,
                "gate": {spec.gate: os.environ.get(spec.gate, "")},
                "settings": {name: os.environ[name] for name in spec.settings if name in os.environ},
                "targets": {},
                "first_use": None,
                "layers_patched": [],
                "shapes_rejected": [],
            },
        )

    def write(self) -> None:
        directory = os.environ.get(MANIFEST_DIR_ENV)
        if not directory:
            return
        try:
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, f"manifest-{self.data['host']}-{os.getpid()}.json")
            tmp = f"{path}.tmp"
            with open(tmp, "w") as handle:
                json.dump(self.data, handle, indent=1, sort_keys=True)
            os.replace(tmp, path)
        except OSError as error:  # evidence must never take the engine down
            logger.error("could not write the adapter manifest under %s: %s", directory, error)


MANIFEST = Manifest()
os.register_at_fork(after_in_child=lambda: MANIFEST.reset_for_process(inherited=True))


def _flush_at_exit() -> None:
    """Statistics are written at most once a second while they accumulate: the last ones at exit."""
    with MANIFEST.lock:
        if any(entry.get("stats") for entry in MANIFEST.data.get("adapters", {}).values()):
            MANIFEST.write()


atexit.register(_flush_at_exit)


class AdapterContext:
    """What an installer gets: the target, its current value, and the evidence helpers."""

    def __init__(self, spec: AdapterSpec, target: Target, module: Any) -> None:
        self.spec, self.target, self.module = spec, target, module
        *owner_path, self.attr_name = target.attribute.split(".")
        owner: Any = module
        for part in owner_path:
            owner = getattr(owner, part)
        self.owner = owner
        self._first_use_logged = False
        self._rejected: set[tuple] = set()

    @property
    def current(self) -> Any:
        return inspect.getattr_static(self.owner, self.attr_name)

    def replace(self, wrapper: Callable, detail: str) -> None:
        original = self.current
        setattr(wrapper, WRAPPER_MARK, self.spec.name)
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        if isinstance(original, staticmethod):
            wrapper = staticmethod(wrapper)  # type: ignore[assignment]
        setattr(self.owner, self.attr_name, wrapper)
        with MANIFEST.lock:
            MANIFEST.adapter(self.spec)["targets"][self.target.dotted] = {"state": "patched", "detail": detail}

    def first_use(self, detail: str) -> None:
        if self._first_use_logged:
            return
        self._first_use_logged = True
        logger.warning("%s first use: %s", self.spec.name, detail)
        with MANIFEST.lock:
            entry = MANIFEST.adapter(self.spec)
            if entry["first_use"] is None:
                entry["first_use"] = {"time": time.time(), "detail": detail}
            MANIFEST.write()

    def record_stat(self, name: str, value: float, every_s: float = 1.0) -> None:
        """A running mean in the manifest (written at most once per `every_s`): what an adapter
        actually did, e.g. the delay it really injected."""
        with MANIFEST.lock:
            stats = MANIFEST.adapter(self.spec).setdefault("stats", {})
            entry = stats.setdefault(name, {"count": 0, "sum": 0.0, "mean": None})
            entry["count"] += 1
            entry["sum"] += value
            entry["mean"] = entry["sum"] / entry["count"]
            now = time.monotonic()
            if now - getattr(self, "_last_stat_write", 0.0) >= every_s:
                self._last_stat_write = now
                MANIFEST.write()

    def note(self, detail: str) -> None:
        """A finding of the adapter's own (what it measured), logged once and kept in the manifest."""
        logger.warning("%s measured: %s", self.spec.name, detail)
        with MANIFEST.lock:
            MANIFEST.adapter(self.spec).setdefault("notes", []).append({"time": time.time(), "detail": detail})
            MANIFEST.write()

    def record_shapes(self, shapes: dict[str, Any]) -> None:
        """What the engine allocated on this rank (the gemm_shapes instrument), in the manifest."""
        with MANIFEST.lock:
            MANIFEST.adapter(self.spec)["shapes"] = shapes
            MANIFEST.write()

    def layer_patched(self, layer: str, detail: str, shape: tuple[int, ...] | None = None) -> None:
        """`shape`: the GEMM shape (N, K) the layer has now; boot checks fail a boot in which a
        kernel then rejected exactly that shape (the adapter armed but rescued nothing)."""
        with MANIFEST.lock:
            MANIFEST.adapter(self.spec)["layers_patched"].append(
                {"layer": layer, "detail": detail, "shape": list(shape) if shape else None})
            MANIFEST.write()

    def reject_shape(self, key: tuple, message: str) -> bool:
        """Record a rejected shape once; returns True the first time (the caller logs)."""
        if key in self._rejected:
            return False
        self._rejected.add(key)
        logger.warning("%s", message)
        with MANIFEST.lock:
            MANIFEST.adapter(self.spec)["shapes_rejected"].append({"shape": list(key), "message": message})
            MANIFEST.write()
        return True

    def rejected(self, key: tuple) -> bool:
        return key in self._rejected


def _marked_by(value: Any, name: str) -> bool:
    seen = 0
    while value is not None and seen < 16:
        func = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        if getattr(func, WRAPPER_MARK, None) == name:
            return True
        value = getattr(func, "__wrapped__", None)
        seen += 1
    return False


def _check_params(target: Target, value: Any) -> str | None:
    if not target.params:
        return None
    func = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
    try:
        names = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return f"{target.dotted} has no inspectable signature"
    missing = [p for p in target.params if p not in names]
    if missing:
        return f"{target.dotted} lacks parameter(s) {', '.join(missing)} (has {', '.join(names)})"
    return None


class _Armer:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.armed_from_env = False
        self.pending: dict[str, list[tuple[AdapterSpec, Target]]] = {}
        self.refused: set[str] = set()

    def refuse(self, spec: AdapterSpec, reason: str, redundant: bool = False) -> None:
        self.refused.add(spec.name)
        state = "redundant" if redundant else "refused"
        log = logger.warning if redundant else logger.error
        log("%s REFUSED (%s): %s", spec.name, state, reason)
        with MANIFEST.lock:
            entry = MANIFEST.adapter(spec)
            entry["state"], entry["reason"] = state, reason
            MANIFEST.write()

    def apply(self, module_name: str, module: Any) -> None:
        with self.lock:
            for spec, target in self.pending.pop(module_name, []):
                if spec.name in self.refused:
                    continue
                self._apply_one(spec, target, module)

    def _apply_one(self, spec: AdapterSpec, target: Target, module: Any) -> None:
        try:
            ctx = AdapterContext(spec, target, module)
            current = ctx.current
        except AttributeError:
            self.refuse(spec, f"hook target {target.dotted} does not exist in this engine")
            return
        if _marked_by(current, spec.name):
            return  # already armed in this process (another arming path got here first)
        problem = _check_params(target, current)
        if problem:
            self.refuse(spec, f"hook target signature moved: {problem}")
            return
        installer = getattr(importlib.import_module(spec.module), target.installer)
        try:
            installer(ctx)
        except Redundant as why:
            self.refuse(spec, str(why), redundant=True)
            return
        except Refused as why:
            self.refuse(spec, str(why))
            return
        with MANIFEST.lock:
            entry = MANIFEST.adapter(spec)
            done = all(
                MANIFEST.adapter(spec)["targets"].get(t.dotted, {}).get("state") == "patched"
                for t in spec.targets_for(os.environ.get(ENGINE_ENV))
            )
            if done and entry["state"] != "armed":
                entry["state"] = "armed"
                logger.warning("%s ARMED: %s", spec.name, spec.summary)
            elif not done:
                entry["state"] = "arming"
            MANIFEST.write()

    def arm(self, names: list[str]) -> None:
        engine = os.environ.get(ENGINE_ENV) or None
        with self.lock:
            for spec in install_order(names):
                MANIFEST.adapter(spec)
                if spec.engine_specific and engine not in spec.engines:
                    self.refuse(spec, f"{ENGINE_ENV}={engine or ''} does not name one of {', '.join(spec.engines)}: "
                                "cannot tell which engine's targets to patch (rig's drivers set it)")
                    continue
                for target in spec.targets_for(engine):
                    self.pending.setdefault(target.module, []).append((spec, target))
            _install_finder()
            for module_name in list(self.pending):
                module = sys.modules.get(module_name)
                if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
                    self.apply(module_name, module)


ARMER = _Armer()


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Wraps the loader of watched modules so targets are patched right after they execute."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in ARMER.pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module") or getattr(loader, "_rig_wrapped", False):
            return spec
        original_exec = loader.exec_module

        @functools.wraps(original_exec)
        def exec_module(module: Any) -> None:
            original_exec(module)
            ARMER.apply(fullname, module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        loader._rig_wrapped = True  # type: ignore[attr-defined]
        return spec


_FINDER = _PostImportFinder()


def _install_finder() -> None:
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def enabled_names(environ: Mapping[str, str] | None = None) -> list[str]:
    return [spec.name for spec in REGISTRY if env_gate(spec.gate, environ)]


# Secrets only the engine's front process needs. vLLM hashes every VLLM_* variable into its compile
# cache key and writes the raw values next to the compiled graphs (envs.py compile_factors,
# compilation/backends.py cache_key_factors.json, 0.24.0): a child process that keeps VLLM_API_KEY
# writes the key to disk. The API server reads it before any child starts; children drop it.
CHILD_SECRETS = ("VLLM_API_KEY",)


def drop_child_secrets() -> None:
    """In an engine's child processes (EngineCore, TP workers), forget the secrets only the API server needs."""
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        for name in CHILD_SECRETS:
            os.environ.pop(name, None)


def engine_plugin() -> None:
    """The engines' plugin entry point (vllm.general_plugins, sglang.srt.plugins): loaded in every
    engine process before the model is built. Drops child secrets, then arms gated adapters."""
    drop_child_secrets()
    arm_from_env()


def arm_from_env() -> None:
    """Entry point for the .pth file and the engines' plugin groups. Cheap when no gate is set."""
    names = enabled_names()
    if not names:
        return
    with ARMER.lock:
        if ARMER.armed_from_env:
            return
        ARMER.armed_from_env = True
        _ensure_log_handler()
        ARMER.arm(names)
