"""Which third-party packages a Python tree imports at module level, starting from some modules.

Reads source only (AST), never imports it. An import inside a function is lazy and not followed; one
inside `try` (or `with suppress(...)`) is "soft"; one under a module-level `if` is "cond" (platform
branches such as `if _is_cuda:`); the rest are "HARD". With --strict, local modules reached only
through a cond import are not followed either (the lower bound); without it they are (the upper
bound, which also walks branches for other platforms).

    python eager_imports.py DIR sglang.launch_server sglang.srt.managers.scheduler ... [--strict] [--list]

DIR holds the unpacked wheels (sglang/, sgl_kernel/, flashinfer/, ...). Output: one line per
third-party top-level module: kind, name, and the first file:line that imports it.
"""

from __future__ import annotations

import ast
import os
import sys
from collections import deque

SOFT, COND, HARD = "soft", "cond", "HARD"
RANK = {HARD: 0, COND: 1, SOFT: 2}


def module_file(root: str, module: str) -> str | None:
    base = os.path.join(root, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def imports(root: str, module: str) -> list[tuple[str, str, int]]:
    """(imported module, kind, line) for every import that runs when `module` is imported."""
    path = module_file(root, module)
    assert path is not None
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    is_package = path.endswith("__init__.py")
    found: list[tuple[str, str, int]] = []

    def visit(body: list[ast.stmt], kind: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.Try):
                visit(node.body, SOFT)
                for part in (node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                    visit(part, kind)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body, kind if kind == SOFT else COND)
                    visit(node.orelse, kind if kind == SOFT else COND)
            elif isinstance(node, ast.With) and "suppress" in ast.unparse(node.items[0]):
                visit(node.body, SOFT)
            elif isinstance(node, (ast.With, ast.ClassDef, ast.For, ast.While)):
                visit(node.body, kind)
            elif isinstance(node, ast.Import):
                found.extend((alias.name, kind, node.lineno) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                found.append((base, kind, node.lineno))
                found.extend((f"{base}.{a.name}", kind, node.lineno) for a in node.names if module_file(root, f"{base}.{a.name}"))

    visit(tree.body, HARD)
    return found


def walk(root: str, roots: list[str], strict: bool) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    local_tops = {name.split(".")[0] for name in os.listdir(root)}
    seen: dict[str, str] = {}
    third: dict[str, tuple[str, str]] = {}
    queue: deque[str] = deque()

    def add(module: str, via: str, kind: str) -> None:
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if parts[0] in local_tops and module_file(root, name):
                if name not in seen:
                    seen[name] = via
                    queue.append(name)
            elif parts[0] not in local_tops:
                if parts[0] not in third or RANK[kind] < RANK[third[parts[0]][0]]:
                    third[parts[0]] = (kind, via)
                return

    for module in roots:
        add(module, "(root)", HARD)
    while queue:
        module = queue.popleft()
        for name, kind, line in imports(root, module):
            if name and name.split(".")[0] in local_tops and (kind == SOFT or (kind == COND and strict)):
                continue
            if name:
                add(name, f"{os.path.relpath(module_file(root, module) or '', root)}:{line}", kind)
    return seen, third


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    seen, third = walk(args[0], args[1:], strict="--strict" in sys.argv)
    print(f"# {len(seen)} local modules imported at module level from {', '.join(args[1:])}")
    for name, (kind, via) in sorted(third.items()):
        if name not in sys.stdlib_module_names and name != "__future__":
            print(f"{kind} {name:28} first at {via}")
    if "--list" in sys.argv:
        for module, via in sorted(seen.items()):
            print(f"LOCAL {module} {via}")


if __name__ == "__main__":
    main()
