"""rig's layering, read from its source: the import graph (every import, also the ones inside
functions, TYPE_CHECKING blocks aside) has no cycle; the CLI handlers are imported by nothing but
the CLI; the Docker SDK client has one home; and the exit codes docs/comparisons.md documents are rig's."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from rig.exits import SIGNALLED, Exit

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "rig"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _owner(name: str) -> str | None:
    """The rig module an imported name lives in (a.b.c -> a.b when c is a name in a.b)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for inner in ast.walk(node))
    return skipped


def imports_of(module: str) -> set[str]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    skipped = _type_checking_nodes(tree)
    found: set[str | None] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(_owner(alias.name) for alias in node.names if alias.name.split(".")[0] == "rig")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            if base.split(".")[0] != "rig":
                continue
            for alias in node.names:  # `from rig.boot import compose` imports the module rig.boot.compose
                found.add(_owner(f"{base}.{alias.name}") if f"{base}.{alias.name}" in MODULES else _owner(base))
    found.discard(None)
    found.discard(module)
    return found  # type: ignore[return-value]


GRAPH = {module: imports_of(module) for module in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (or a self-loop)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read_from_rigs_own_modules():
    assert {"rig.cli", "rig.deploy.recipe", "rig.load.metrics", "rig.compare.report", "rig.boot.base"} <= set(GRAPH)
    assert "rig.paths" in GRAPH["rig.load.scenarios"]  # a top-level import
    assert "rig.deploy.build" in GRAPH["rig.cli.recipes"]  # one inside a function counts too
    assert "rig.boot.compose" in GRAPH["rig.boot"]  # `from rig.boot import compose` is the module


def test_no_import_cycle_between_rigs_modules():
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("handler", ["rig.loadrun.command", "rig.compare.command", "rig.audit.command", "rig.kernelbench.command"])
def test_command_line_handlers_are_imported_by_commands_only(handler):
    """A handler prints and picks exit codes; library code never borrows from one (`rig demo` is a
    command that runs a comparison)."""
    importers = {module for module, targets in GRAPH.items() if handler in targets and not module.startswith("rig.cli.")}
    assert importers <= {"rig.demo"}, importers


def test_the_comparison_runs_its_load_through_the_session_not_the_loadtest_command():
    assert "rig.loadrun.command" not in GRAPH["rig.compare.run"]
    assert "rig.loadrun.session" in GRAPH["rig.compare.run"]


def test_the_boot_schedule_boots_nothing_and_reads_no_file():
    """rig.compare.schedule is the boot order as a state machine: it reads the plan's types and nothing
    that boots, loads or reads a comparison's directory (rig.compare.run executes its jobs)."""
    assert GRAPH["rig.compare.schedule"] <= {"rig.compare.arms", "rig.compare.model", "rig.compare.sequential"}


def test_the_locust_client_is_imported_by_nothing_else_in_rig():
    """rig.load.client imports Locust, which patches the standard library with gevent on import: only
    the Locust file (loadtests/locustfile.py) loads it."""
    client = {module for module in GRAPH if module == "rig.load.client" or module.startswith("rig.load.client.")}
    assert client >= {"rig.load.client.process", "rig.load.client.patches"}
    importers = sorted(module for module, targets in GRAPH.items() if targets & client and module not in client)
    assert importers == [], importers


def test_the_docker_client_has_its_own_module():
    users = {module for module, targets in GRAPH.items() if "rig.docker_client" in targets}
    assert {"rig.deploy.build", "rig.boot.rehearse", "rig.boot.compose", "rig.drift"} <= users
    for module in ("rig.deploy.build", "rig.boot.rehearse", "rig.drift"):
        assert "rig.boot.compose" not in GRAPH[module], module


def test_the_pin_store_is_apart_from_the_rehearsal():
    """render, build and pin read the lab's pins; only the rehearsal builds on them."""
    for module in ("rig.deploy.render", "rig.deploy.build", "rig.deploy.pin"):
        assert "rig.deploy.pins" in GRAPH[module] and "rig.boot.rehearse" not in GRAPH[module]
    assert GRAPH["rig.deploy.pins"] <= {"rig.atomic", "rig.deploy.recipe_model", "rig.paths", "rig.strict_yaml"}


# Modules split by subject, lowest layer first: each imports the one below it and none above it.
SPLIT_LAYERS = [
    ("rig.deploy.recipe_model", "rig.deploy.recipe_owned", "rig.deploy.recipe"),  # schema, what rig owns, reading a file
    ("rig.load.peers.common", "rig.load.peers.vllm", "rig.load.peers"),  # one module per peer format, under the commands
    ("rig.load.peers.common", "rig.load.peers.aiperf", "rig.load.peers"),
    ("rig.loadrun.locust_run", "rig.loadrun.runner"),  # the Locust processes, under the run
    ("rig.loadrun.writeup", "rig.loadrun.runner"),  # what the run's files yield, under the run
    ("rig.testing.step_engine", "rig.testing.timed_server"),
]


@pytest.mark.parametrize("layers", SPLIT_LAYERS, ids=lambda layers: layers[-2])
def test_split_modules_import_only_downward(layers):
    for lower, upper in zip(layers, layers[1:]):
        assert lower in GRAPH[upper], (upper, lower)
    for index, module in enumerate(layers):
        assert not GRAPH[module] & set(layers[index + 1:]), module


@pytest.mark.parametrize("module", ["rig.grammar", "rig.env_names", "rig.log_patterns"])
def test_the_grammars_import_nothing_of_rig(module):
    """Grammars are leaves: every reader of rig's inputs may use them without pulling in the rest."""
    assert GRAPH[module] == set()


def test_the_readme_documents_every_exit_code():
    readme = (REPO / "docs" / "comparisons.md").read_text()
    section = readme.split("### Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {row.split("|")[1].strip() for row in section.splitlines() if re.match(r"\| [0-9]", row)}
    assert documented == {str(int(code)) for code in Exit} | {f"{SIGNALLED}+N"}


def package(module: str) -> str:
    """rig.load.metrics -> load; rig.cli -> (top)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or module in {f"rig.{p}" for p in ("load", "compare", "boot", "deploy", "observe", "audit", "tune",
                                                                         "testing", "loadrun")} \
        else "(top)"


# The flow's direction: a package imports only packages before it (recipe -> boot -> load -> loadrun ->
# compare). load measures and never boots or reads a recipe: loadrun boots or attaches, then drives
# load. compare reads what load measured, never the other way round. deploy renders and builds; it
# never boots.
FORBIDDEN = {("load", "compare"), ("deploy", "boot"), ("deploy", "load"), ("deploy", "compare"), ("boot", "load"),
             ("boot", "compare"), ("observe", "compare"), ("observe", "load"), ("compare", "tune"),
             ("load", "boot"), ("load", "deploy"), ("load", "loadrun"), ("loadrun", "compare"), ("deploy", "loadrun"),
             ("boot", "loadrun"), ("observe", "loadrun")}


@pytest.mark.parametrize("direction", sorted(FORBIDDEN), ids=lambda d: f"{d[0]}-not-{d[1]}")
def test_packages_import_only_along_the_flow(direction):
    source, target = direction
    found = sorted(f"{module} -> {imported}" for module, imports in GRAPH.items() if package(module) == source
                   for imported in imports if package(imported) == target)
    assert found == [], found


def test_the_test_servers_are_imported_by_nothing_in_the_product():
    """rig/testing/ holds servers with known timing for the tests and benchmarks: neither rig outside
    it nor the Locust file (loadtests/) imports it."""
    testing = {module for module in GRAPH if module == "rig.testing" or module.startswith("rig.testing.")}
    assert testing >= {"rig.testing.timed_server", "rig.testing.step_engine", "rig.testing.toy_lm"}
    importers = [module for module, targets in GRAPH.items() if targets & testing and module not in testing]
    for path in sorted((REPO / "loadtests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name == "rig.testing" or name.startswith("rig.testing.") for name in names):
                importers.append(str(path.relative_to(REPO)))
    assert sorted(importers) == [], importers


def test_every_slo_names_a_per_request_figure():
    from rig.load.goodput import SLO_KEYS
    from rig.load.request_metrics import PER_REQUEST

    assert set(SLO_KEYS) <= set(PER_REQUEST)


def test_no_module_of_rig_is_named_after_a_standard_library_module():
    """`python rig/tinymodel.py` puts rig/ first on sys.path: a rig/secrets.py then shadowed the
    standard library's, and the script died importing it."""
    import sys

    shadowing = sorted(str(path.relative_to(REPO)) for path in PACKAGE.rglob("*.py")
                       if path.stem in sys.stdlib_module_names)
    assert shadowing == [], shadowing


def test_the_model_generator_runs_as_the_script_its_usage_names():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, str(PACKAGE / "tinymodel.py"), "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "usage: tinymodel.py" in result.stdout, result.stderr[-500:]


def test_the_readme_architecture_table_matches_the_tree():
    """Every module of rig/ is named in docs/architecture.md's "Where the code lives" table, in its package's
    row, and every module the table names exists."""
    readme = (REPO / "docs" / "architecture.md").read_text()
    section = readme.split("## Where the code lives", 1)[1].split("\n## ", 1)[0]
    listed: set[str] = set()
    for row in section.splitlines():
        cells = [c.strip() for c in row.split("|")]
        if len(cells) < 4 or not cells[1].startswith("`rig"):
            continue
        package = cells[1].strip("`").rstrip("/").replace("/", ".")
        listed |= {f"{package}.{name}" for name in re.findall(r"`([a-z][a-z0-9_]*)`", cells[2])}
    actual = {module for module, path in MODULES.items() if path.name not in ("__init__.py", "__main__.py")}
    assert sorted(actual - listed) == [] and sorted(listed - actual) == []
