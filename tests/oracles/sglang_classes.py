"""Real SGLang classes on the CPU, without SGLang's dependencies: chosen modules of a release wheel
are executed from the wheel's own source, every other `sglang.*` (and sgl_kernel, flashinfer,
triton, numba) module is a stand-in whose names are permissive stubs.

Used by tests that must see what only stock classes show (stock RowParallelLinear stores no
`layer.prefix`, so an adapter that picks its layer by it fails on the real class, while a
`SimpleNamespace(prefix=...)` would pass). A stub is falsy, zero in arithmetic, empty when iterated, a no-op decorator and a plain base
class, i.e. "feature off" on a single-process CPU; the few values a constructor needs to be
real (one rank, no fused shared experts, pipeline stage 0 of 1) are given by name in `GIVEN`.
What the real modules define (layer classes, the model's module tree, the names it gives its
layers) is the wheel's own.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.util
import sys
import types
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

STUBBED_TOPS = ("sglang", "sgl_kernel", "flashinfer", "triton", "numba")


class Stub:
    """Any name a stand-in module is asked for."""

    def __init__(self, name: str = "stub") -> None:
        object.__setattr__(self, "_name", name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator: the function stays itself
        return Stub(f"{self._name}()")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub(f"{self._name}.{name}")

    def __bool__(self) -> bool:
        return False

    def __index__(self) -> int:
        return 0

    __int__ = __index__

    def __float__(self) -> float:
        return 0.0

    def __add__(self, other: Any) -> Any:
        return other

    __radd__ = __add__

    def __lt__(self, other: Any) -> bool:
        return False

    __gt__ = __le__ = __ge__ = __lt__

    def __iter__(self) -> Any:
        return iter(())

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (type(self._name.rsplit(".", 1)[-1], (object,), {"__init__": lambda self, *a, **k: None}),)

    def __repr__(self) -> str:
        return f"<stub {self._name}>"


class _StandIn(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return GIVEN.get(name, Stub(f"{self.__name__}.{name}"))


GIVEN: dict[str, Any] = {}


class WheelClasses(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Installs itself first on sys.meta_path; `real` modules come from `root` (an unpacked wheel)."""

    def __init__(self, root: Path, real: Iterable[str]) -> None:
        self.root, self.real = root, set(real)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] not in STUBBED_TOPS:
            return None
        if fullname in self.real:
            return importlib.util.spec_from_file_location(fullname, self.root / (fullname.replace(".", "/") + ".py"))
        return importlib.util.spec_from_loader(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StandIn(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass

    def install(self) -> WheelClasses:
        for name in [n for n in sys.modules if n.split(".")[0] in STUBBED_TOPS]:
            del sys.modules[name]
        sys.meta_path.insert(0, self)
        return self


def unpack(wheel: Path, modules: Iterable[str], into: Path) -> Path:
    """The named modules' source files out of the wheel, into `into` (nothing else is needed)."""
    with zipfile.ZipFile(wheel) as archive:
        for module in modules:
            archive.extract(module.replace(".", "/") + ".py", into)
    return into


def function_from_source(path: Path, name: str) -> Callable:
    """One top-level function of a wheel's module, compiled from its own source alone (for a pure
    helper whose module drags in the world, e.g. sglang.srt.utils.common.add_prefix)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102 - the wheel's own code
    return namespace[name]
