"""Static verification of hook targets: read an engine's source without importing it.

Used on the host against the wheel a recipe pins (`rig adapters check`) and inside a built
image against the engine installed there (`python -m rig_adapters check-targets`).
"""

from __future__ import annotations

import ast
import importlib.util
import os
from collections.abc import Callable

from rig_adapters.registry import REGISTRY, AdapterSpec, KernelEntry, Target

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


def _positional_params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [a.arg for a in node.args.posonlyargs + node.args.args]


def _definition(module: str, attribute: str, read: SourceReader) -> tuple[ast.Module | None, ast.AST | None, str | None]:
    """(module tree, node, problem) for module.attribute."""
    source = read(module)
    if source is None:
        return None, None, f"module {module} does not exist"
    tree = ast.parse(source)
    node = find_attribute(tree, attribute)
    if node is None:
        return tree, None, f"{module}.{attribute} does not exist"
    return tree, node, None


def _check_signature(dotted: str, node: ast.AST, params: tuple[str, ...], by_position: tuple[str, ...]) -> str | None:
    if not params:
        return None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"{dotted} is not a plain function here, its parameters cannot be verified"
    have = _params(node)
    missing = [p for p in params if p not in have]
    if missing:
        return f"{dotted} lacks parameter(s) {', '.join(missing)} (has {', '.join(have)})"
    order = _positional_params(node)[: len(by_position)]
    if tuple(order) != by_position:
        return (f"{dotted} takes ({', '.join(order)}) by position where the wrapper assumes "
                f"({', '.join(by_position)}): arguments would land in the wrong parameters")
    return None


def check_target(target: Target, read: SourceReader) -> str | None:
    """None when the target exists with every parameter the adapter relies on, in the order its
    wrapper assumes, and is still called from every declared call site; else why not."""
    _, node, problem = _definition(target.module, target.attribute, read)
    if problem or node is None:
        return problem
    problem = _check_signature(target.dotted, node, target.params, target.by_position)
    if problem:
        return problem
    all_params = _params(node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
    for caller in target.callers:
        problem = check_caller(target, caller, all_params, read)
        if problem:
            return problem
    return None


def _resolve(dotted: str, read: SourceReader) -> tuple[str, str, str] | None:
    """'pkg.mod.Class.fn' -> (module, 'Class.fn', source) for the longest module prefix that exists."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        source = read(".".join(parts[:cut]))
        if source is not None:
            return ".".join(parts[:cut]), ".".join(parts[cut:]), source
    return None


def _names_for(target: Target, caller_tree: ast.Module) -> set[str]:
    """How the caller's module can spell the target: its own name, or an alias it imports it under."""
    name = target.attribute.split(".")[-1]
    names = {name}
    for statement in ast.walk(caller_tree):
        if isinstance(statement, ast.ImportFrom) and statement.module == target.module:
            names |= {alias.asname or alias.name for alias in statement.names if alias.name == name}
    return names


def _refers(node: ast.AST, names: set[str]) -> bool:
    return isinstance(node, ast.Name) and node.id in names or isinstance(node, ast.Attribute) and node.attr in names


def _call_sites(body: ast.AST, names: set[str], owner_class: str | None = None) -> list[tuple[ast.Call, list[ast.expr], int]]:
    """(call, positional arguments, parameters bound before them) for each call of the target,
    direct (`f(..)`, `self.f(..)`) or through functools.partial (`partial(f, ..)`). A method target
    (`owner_class` its class) called on any object (`self.worker.f(..)`, `super().f(..)`) has its
    self bound; only `OwnerClass.f(obj, ..)` passes self by position."""
    sites = []
    for node in ast.walk(body):
        if not isinstance(node, ast.Call):
            continue
        if _refers(node.func, names):
            on = node.func.value if isinstance(node.func, ast.Attribute) else None
            on_self = isinstance(on, ast.Name) and on.id in ("self", "cls")
            on_instance = owner_class is not None and on is not None and not (isinstance(on, ast.Name) and on.id == owner_class)
            sites.append((node, list(node.args), 1 if on_self or on_instance else 0))
        elif _refers(node.func, {"partial"}) and node.args and _refers(node.args[0], names):
            sites.append((node, list(node.args[1:]), 0))
    return sites


def _argument_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def check_caller(target: Target, caller: str, target_params: list[str], read: SourceReader) -> str | None:
    """None when `caller` still calls the target with arguments the wrapper reads correctly."""
    found = _resolve(caller, read)
    if found is None:
        return f"call site {caller} does not exist (its module is gone)"
    _, attribute, source = found
    tree = ast.parse(source)
    body = find_attribute(tree, attribute)
    if not isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"call site {caller} does not exist"
    names = _names_for(target, tree)
    owner = target.attribute.split(".")[-2] if "." in target.attribute else None
    sites = _call_sites(body, names, owner)
    if not sites:
        return f"{caller} no longer calls {target.dotted}: the adapter's hook would never run"
    order = target.params
    for call, positional, bound in sites:
        where = f"{caller} (line {call.lineno})"
        if any(isinstance(arg, ast.Starred) for arg in positional):
            return f"{where} passes *args to {target.attribute}: the argument order cannot be verified"
        if bound + len(positional) > len(target.by_position):
            return (f"{where} passes {bound + len(positional)} argument(s) by position to {target.attribute}; "
                    f"the wrapper takes {len(target.by_position)} so ({', '.join(target.by_position)})")
        for index, argument in enumerate(positional, start=bound):
            name = _argument_name(argument)
            if name in order and name != order[index]:
                return f"{where} passes {name} in the position of {order[index]}: the wrapper would read it as {order[index]}"
        for keyword in call.keywords:
            if keyword.arg is not None and target_params and keyword.arg not in target_params:
                return f"{where} passes {keyword.arg}=, which {target.dotted} does not take"
    return None


def check_kernel(kernel: KernelEntry, read: SourceReader) -> str | None:
    """None when the kernel library entry point exists with the parameters and values the route
    needs, and the exception classes the fallback catches still exist; else why not."""
    tree, node, problem = _definition(kernel.module, kernel.attribute, read)
    if problem or node is None:
        return f"{kernel.distribution}: {problem}"
    problem = _check_signature(kernel.dotted, node, kernel.params, ())
    if problem:
        return f"{kernel.distribution}: {problem}"
    if kernel.accepts and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"{kernel.distribution}: {kernel.dotted} is not a plain function here, its parameters cannot be verified"
    for parameter, value in kernel.accepts:
        arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs  # type: ignore[union-attr]
        annotation = next((a.annotation for a in arguments if a.arg == parameter), None)
        values = {n.value for n in ast.walk(annotation) if isinstance(n, ast.Constant)} if annotation is not None else set()
        if value not in values:
            return f"{kernel.distribution}: {kernel.dotted} no longer lists {parameter}={value!r} (accepts {sorted(map(str, values)) or 'any'})"
    for dotted in kernel.raises:
        module, _, name = dotted.rpartition(".")
        _, found, problem = _definition(module, name, read)
        if problem or not isinstance(found, ast.ClassDef):
            return f"{kernel.distribution}: the fallback catches {dotted}, which no longer exists"
    return None


def redundancy(spec: AdapterSpec, read: SourceReader) -> str | None:
    if spec.redundant_if is None:
        return None
    distribution, module, attribute = spec.redundant_if
    source = read(module)
    if source is None or find_attribute(ast.parse(source), attribute) is None:
        return None
    return f"{distribution} has {module}.{attribute}: {spec.lifecycle.redundant_when}"


def verdict(spec: AdapterSpec, read: SourceReader, engine: str | None = None) -> tuple[str, str]:
    """('would arm' | 'refuses' | 'redundant', detail) in `engine` (its targets only)."""
    targets = spec.targets_for(engine) if engine else spec.targets
    problems = [p for p in (check_target(t, read) for t in targets) if p]
    problems += [p for p in (check_kernel(k, read) for k in spec.kernels) if p]
    if problems:
        return "refuses", "; ".join(problems)
    why = redundancy(spec, read)
    if why:
        return "redundant", why
    reached = [t.dotted + (f" (called from {', '.join(c.rsplit('.', 1)[-1] for c in t.callers)})" if t.callers else "")
               for t in targets]
    reached += [f"{k.distribution} {k.attribute}" + "".join(f" {p}={v!r}" for p, v in k.accepts) for k in spec.kernels]
    return "would arm", ", ".join(reached)


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
    return [(spec.name, *verdict(spec, installed_reader, engine)) for spec in REGISTRY if engine in spec.engines]
