"""Constant expressions read from a wheel's Python source without importing it.

The engine-argument reader (tests/oracles/engine_args.py) needs the literal values that define an engine's
flags: choice lists, alias lists, the action classes of its parser. `WheelSource` parses a wheel's
modules on demand and executes only modules that import nothing beyond the standard library and
msgspec; `Evaluator` resolves a name across the wheel's imports to its module-level assignment and
evaluates literals, list/set algebra and the few pure builtins such definitions use. What it does
not evaluate raises `Unresolvable`; the caller decides whether that value matters.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

# The only third-party import an executed module may have: SGLang's arg_utils defines Arg on msgspec.Struct.
EXECUTABLE_IMPORTS = set(sys.stdlib_module_names) | {"msgspec", "__future__"}
_BUILTIN_VALUES = {name: getattr(builtins, name) for name in ("str", "int", "float", "bool", "list", "dict", "set", "tuple")}
_PURE_CALLS = {"list": list, "sorted": sorted, "set": set, "tuple": tuple, "dict": dict, "frozenset": frozenset}
_MUTATORS = {"append", "extend", "add", "update"}
# Standard-library modules whose attributes a flag definition may name (argparse.SUPPRESS, typing.Optional).
_STDLIB_READABLE = {"argparse", "typing", "json", "enum", "dataclasses", "collections.abc"}


class Unresolvable(Exception):
    """An expression the static reader does not evaluate."""


class Opaque:
    """Stands in for a value that is stored but never read (an enum member a deprecated flag stores)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"<not evaluated: {self.text}>"


class WheelSource:
    """Module sources of one wheel, parsed on demand, with module-level names resolved across imports."""

    def __init__(self, wheel: Path) -> None:
        self.wheel = wheel
        self.archive = zipfile.ZipFile(wheel)
        self.files = set(self.archive.namelist())
        self.version = wheel.name.split("-")[1]
        self._trees: dict[str, ast.Module] = {}
        self._executed: dict[str, types.ModuleType] = {}
        self._refused: dict[str, str] = {}
        self._bindings: dict[str, dict[str, list[ast.stmt]]] = {}

    def path(self, module: str) -> str | None:
        base = module.replace(".", "/")
        return next((p for p in (f"{base}.py", f"{base}/__init__.py") if p in self.files), None)

    def tree(self, module: str) -> ast.Module:
        if module not in self._trees:
            path = self.path(module)
            if path is None:
                raise Unresolvable(f"module {module} is not in {self.wheel.name}")
            self._trees[module] = ast.parse(self.archive.read(path).decode("utf-8"), filename=path)
        return self._trees[module]

    def where(self, module: str, node: ast.AST | None = None) -> str:
        return f"{self.path(module)}:{getattr(node, 'lineno', 1)}"

    def absolute(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        package = module.split(".") if (self.path(module) or "").endswith("__init__.py") else module.split(".")[:-1]
        base = package[: len(package) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def execute(self, module: str) -> types.ModuleType:
        """Run a module that imports only the standard library and msgspec; anything heavier is refused."""
        if module in self._refused:
            raise Unresolvable(self._refused[module])
        if module not in self._executed:
            tree = self.tree(module)
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [self.absolute(module, node)] if isinstance(node, ast.ImportFrom) else []
                heavy = [n for n in names if n.split(".")[0] not in EXECUTABLE_IMPORTS]
                if heavy:
                    self._refused[module] = f"{self.where(module, node)} imports {heavy[0]}"
                    raise Unresolvable(self._refused[module])
            name = f"_rig_engine_source.{self.wheel.stem}.{module}"
            executed = types.ModuleType(name)
            executed.__file__ = f"{self.wheel}/{self.path(module)}"
            sys.modules[name] = executed  # dataclasses and msgspec look their class's module up here
            exec(compile(tree, executed.__file__, "exec"), executed.__dict__)  # noqa: S102 - the pinned release's own stdlib-only module
            self._executed[module] = executed
        return self._executed[module]

    def bindings(self, module: str) -> dict[str, list[ast.stmt]]:
        """Unconditional module-level statements that bind or mutate each name, in order."""
        if module in self._bindings:
            return self._bindings[module]
        found: dict[str, list[ast.stmt]] = {}
        for stmt in self.tree(module).body:
            targets: list[str] = []
            if isinstance(stmt, ast.Assign):
                targets = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
            elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and isinstance(stmt.target, ast.Name):
                targets = [stmt.target.id]
            elif isinstance(stmt, (ast.ClassDef, ast.FunctionDef)):
                targets = [stmt.name]
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                targets = [(a.asname or a.name).split(".")[0] for a in stmt.names]
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute) \
                    and stmt.value.func.attr in _MUTATORS and isinstance(stmt.value.func.value, ast.Name):
                targets = [stmt.value.func.value.id]
            for target in targets:
                found.setdefault(target, []).append(stmt)
        self._bindings[module] = found
        return found

    def classdef(self, module: str, name: str) -> ast.ClassDef:
        node = next((s for s in self.tree(module).body if isinstance(s, ast.ClassDef) and s.name == name), None)
        if node is None:
            raise Unresolvable(f"no class {name} in {module}")
        return node


class Evaluator:
    """Evaluates the constant expressions that define flags: literals, names bound to them, list algebra."""

    def __init__(self, source: WheelSource) -> None:
        self.source = source

    def lookup(self, module: str, name: str) -> tuple[str, ast.stmt | None, list[ast.stmt]]:
        """(module, binding statement, later mutations); an import is followed into the module it names."""
        statements = self.source.bindings(module).get(name)
        if not statements:
            if name in _BUILTIN_VALUES:
                return "builtins", None, []
            raise Unresolvable(f"{name} is not bound at module level in {module}")
        binds = [i for i, s in enumerate(statements) if not isinstance(s, (ast.Expr, ast.AugAssign))]
        if not binds:
            raise Unresolvable(f"{name} is only mutated, never bound, in {module}")
        binding, mutations = statements[binds[-1]], statements[binds[-1] + 1:]
        if isinstance(binding, ast.ImportFrom):
            origin = self.source.absolute(module, binding)
            alias = next(a for a in binding.names if (a.asname or a.name) == name)
            if self.source.path(f"{origin}.{alias.name}"):
                return f"{origin}.{alias.name}", None, []
            if self.source.path(origin):
                return self.lookup(origin, alias.name)
            return f"external:{origin}:{alias.name}", None, []
        if isinstance(binding, ast.Import):
            alias = next(a for a in binding.names if (a.asname or a.name).split(".")[0] == name)
            return f"external-module:{alias.name if alias.asname else name}", None, []
        return module, binding, mutations

    def value(self, node: ast.expr, module: str, local: dict[str, Any] | None = None) -> Any:
        local = local or {}
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items: list[Any] = []
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    items.extend(self.value(element.value, module, local))
                else:
                    items.append(self.value(element, module, local))
            return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
        if isinstance(node, ast.Dict):
            result: dict[Any, Any] = {}
            for key, item in zip(node.keys, node.values):
                if key is None:
                    result.update(self.value(item, module, local))
                else:
                    result[self.value(key, module, local)] = self.value(item, module, local)
            return result
        if isinstance(node, ast.Name):
            if node.id in local:
                if isinstance(local[node.id], Opaque):
                    raise Unresolvable(local[node.id].text)
                return local[node.id]
            return self.name(module, node.id)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id not in local:
                origin, binding, _ = self.lookup(module, node.value.id)
                if isinstance(binding, ast.ClassDef):
                    return self.class_constant(origin, binding, node.attr)
            base = self.value(node.value, module, local)
            if isinstance(base, ModuleRef):
                return base.attribute(self, node.attr)
            if isinstance(base, types.ModuleType) and hasattr(base, node.attr):
                return getattr(base, node.attr)
            raise Unresolvable(ast.unparse(node))
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.BitOr)):
            left, right = self.value(node.left, module, local), self.value(node.right, module, local)
            try:
                return left + right if isinstance(node.op, ast.Add) else left | right
            except TypeError:
                raise Unresolvable(ast.unparse(node)) from None
        if isinstance(node, ast.Call) and not node.keywords:
            args = [self.value(a, module, local) for a in node.args]
            if isinstance(node.func, ast.Name) and node.func.id in _PURE_CALLS and node.func.id not in local:
                return _PURE_CALLS[node.func.id](*args)
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("keys", "values", "items", "copy") and not args:
                base = self.value(node.func.value, module, local)
                if isinstance(base, (dict, list, set)):
                    return list(getattr(base, node.func.attr)()) if node.func.attr != "copy" else base.copy()
        raise Unresolvable(ast.unparse(node))

    def class_constant(self, module: str, classdef: ast.ClassDef, attribute: str) -> Any:
        """A constant assigned in a class body (`class Backend: FULL = "full"; ALL = (FULL, ...)`)."""
        scope: dict[str, Any] = {}
        for stmt in classdef.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                try:
                    scope[stmt.targets[0].id] = self.value(stmt.value, module, scope)
                except Unresolvable as why:
                    scope[stmt.targets[0].id] = Opaque(str(why))
        if attribute not in scope or isinstance(scope[attribute], Opaque):
            raise Unresolvable(f"{classdef.name}.{attribute}")
        return scope[attribute]

    def name(self, module: str, name: str) -> Any:
        origin, binding, mutations = self.lookup(module, name)
        if origin == "builtins":
            return _BUILTIN_VALUES[name]
        if origin.startswith("external"):
            return ModuleRef.external(origin)
        if binding is None:
            return ModuleRef(origin)
        if isinstance(binding, (ast.ClassDef, ast.FunctionDef)):
            try:
                return getattr(self.source.execute(origin), name)
            except Unresolvable as why:
                raise Unresolvable(f"{name} is defined in {origin}, which rig does not execute ({why})") from None
        if not isinstance(binding, (ast.Assign, ast.AnnAssign)) or binding.value is None:
            raise Unresolvable(f"{name} at {self.source.where(origin, binding)}")
        result = self.value(binding.value, origin)
        for mutation in mutations:
            if isinstance(mutation, ast.AugAssign):
                operand = self.value(mutation.value, origin)
                result = result + operand if isinstance(mutation.op, ast.Add) else result | operand
            else:
                call = mutation.value
                try:
                    getattr(result, call.func.attr)(*[self.value(a, origin) for a in call.args])
                except (AttributeError, TypeError):
                    raise Unresolvable(ast.unparse(mutation)) from None
        return result


class ModuleRef:
    """A module named in an import: one of the wheel's, or an external one (only stdlib attributes are read)."""

    def __init__(self, module: str) -> None:
        self.module = module

    @classmethod
    def external(cls, origin: str) -> Any:
        parts = origin.split(":")
        if parts[1] not in _STDLIB_READABLE:
            raise Unresolvable(f"{parts[1]} is not part of the engine's wheel")
        module = importlib.import_module(parts[1])
        return getattr(module, parts[2]) if len(parts) == 3 else module

    def attribute(self, evaluator: Evaluator, name: str) -> Any:
        return evaluator.name(self.module, name)
