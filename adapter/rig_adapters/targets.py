"""Static verification of hook targets: read an engine's source without importing it.

Used on the host against the wheel a recipe pins (`rig adapters check`) and inside a built
image against the engine installed there (`python -m rig_adapters check-targets`).
"""

from __future__ import annotations

import ast
import importlib.util
import os
from collections.abc import Callable

from rig_adapters.registry import REGISTRY, AdapterSpec, Target

SourceReader = Callable[[str], "str | None"]  # module name -> source text, or None if absent


def module_file_candidates(module: str) -> list[str]:
    base = module.replace(".", "/")
    return [f"{base}.py", f"{base}/__init__.py"]


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    if args.vararg:
        names.append("*" + args.vararg.arg)
    if args.kwarg:
        names.append("**" + args.kwarg.arg)
    return names


def find_attribute(tree: ast.Module, dotted: str) -> ast.AST | None:
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for part in dotted.split("."):
        node = None
        for statement in body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and statement.name == part or isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == part for t in statement.targets) or isinstance(statement, ast.ImportFrom) and any((a.asname or a.name) == part for a in statement.names):
                node = statement
        if node is None:
            return None
        body = node.body if isinstance(node, ast.ClassDef) else []
    return node


def check_target(target: Target, read: SourceReader) -> str | None:
    """None when the target exists with every parameter the adapter relies on, else why not."""
    source = read(target.module)
    if source is None:
        return f"module {target.module} does not exist"
    node = find_attribute(ast.parse(source), target.attribute)
    if node is None:
        return f"{target.dotted} does not exist"
    if target.params and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        have = _params(node)
        missing = [p for p in target.params if p not in have]
        if missing:
            return f"{target.dotted} lacks parameter(s) {', '.join(missing)} (has {', '.join(have)})"
    elif target.params:
        return f"{target.dotted} is not a plain function here, its parameters cannot be verified"
    return None


def redundancy(spec: AdapterSpec, read: SourceReader) -> str | None:
    if spec.redundant_if is None:
        return None
    distribution, module, attribute = spec.redundant_if
    source = read(module)
    if source is None or find_attribute(ast.parse(source), attribute) is None:
        return None
    return f"{distribution} has {module}.{attribute}: {spec.lifecycle.redundant_when}"


def verdict(spec: AdapterSpec, read: SourceReader) -> tuple[str, str]:
    """('would arm' | 'refuses' | 'redundant', detail)."""
    problems = [p for p in (check_target(t, read) for t in spec.targets) if p]
    if problems:
        return "refuses", "; ".join(problems)
    why = redundancy(spec, read)
    if why:
        return "redundant", why
    return "would arm", ", ".join(t.dotted for t in spec.targets)


def installed_reader(module: str) -> str | None:
    """Read a module's source from this interpreter's packages without importing it."""
    top = module.split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        root = os.path.dirname(location)
        for candidate in module_file_candidates(module):
            path = os.path.join(root, candidate)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as handle:
                    return handle.read()
    return None


def check_installed(engine: str) -> list[tuple[str, str, str]]:
    return [(spec.name, *verdict(spec, installed_reader)) for spec in REGISTRY if engine in spec.engines]
