"""The package's shape stays as designed: no import loops (not even through an import inside a
function) and dependencies pointing one way between the core's domains."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PROVIDER = Path(__file__).resolve().parents[2] / "provider"
PACKAGE = "xtrabackup_provider"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PROVIDER).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Modules of the package that `path` imports anywhere (a function body too), except under
    `if TYPE_CHECKING:`, which never runs."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:  # `from . import prepare` names a module
                candidate = f"{module}.{alias.name}"
                found.add(candidate if candidate in MODULES else module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in MODULES}


MODULES = {_module_name(p): p for p in (PROVIDER / PACKAGE).rglob("*.py")}
GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _domain(module: str) -> str:
    """`xtrabackup_provider.core.restore.chain` -> `core.restore`; `xtrabackup_provider.cli.main` -> `cli`."""
    parts = module.split(".")[1:]
    return ".".join(parts[:2]) if parts and parts[0] == "core" else (parts[0] if parts else "")


# Old import paths kept as re-exports: aliases of another domain's names, not dependencies.
SHIMS = {f"{PACKAGE}.operators.s3", f"{PACKAGE}.operators._common"}


def _domain_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, imported in GRAPH.items():
        if module in SHIMS:
            continue
        here = _domain(module)
        graph.setdefault(here, set()).update(d for d in map(_domain, imported) if d != here)
    return graph


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_walk_sees_the_package():
    assert len(MODULES) > 80
    assert "xtrabackup_provider.core.catalog.manifest" in GRAPH["xtrabackup_provider.core.catalog.backups"]
    # an import inside a function counts: the CLI imports the backup verb only when it runs one
    assert "xtrabackup_provider.core.backup.run" in GRAPH["xtrabackup_provider.cli.backups"]


def test_no_module_imports_itself_back():
    assert _cycle(GRAPH) is None, f"import loop: {' -> '.join(_cycle(GRAPH) or [])}"


def test_domains_depend_one_way():
    domains = _domain_graph()
    assert _cycle(domains) is None, f"domain loop: {' -> '.join(_cycle(domains) or [])}"


@pytest.mark.parametrize(
    ("domain", "must_not_reach"),
    [
        # the storage layer and the tool rules know nothing of what is built on them
        ("core.storage", {"core.backup", "core.restore", "core.pitr", "core.retention", "core.catalog"}),
        ("core.engine", {"core.backup", "core.restore", "core.storage", "core.catalog", "core.db"}),
        ("core.catalog", {"core.backup", "core.restore", "core.binlog", "core.retention"}),
        # nothing in the core knows Airflow, the CLI or the DAG helpers
        *[
            (f"core.{d}", {"operators", "sensors", "triggers", "hooks", "cli", "dag_tasks", "dags", "policy"})
            for d in (
                "storage",
                "catalog",
                "engine",
                "db",
                "pipeline",
                "backup",
                "restore",
                "binlog",
                "pitr",
                "retention",
                "report",
                "config",
                "common",
            )
        ],
        ("operators", {"cli"}),
        ("sensors", {"cli"}),
        ("cli", {"operators", "sensors", "triggers", "hooks", "dag_tasks", "dags"}),
        # the DAG factories build on the operators; nothing the operators use builds DAGs
        *[(d, {"dags"}) for d in ("operators", "sensors", "triggers", "hooks", "dag_tasks")],
    ],
)
def test_dependencies_point_down(domain, must_not_reach):
    reached = _reaches(_domain_graph(), domain)
    assert not reached & must_not_reach, f"{domain} reaches {sorted(reached & must_not_reach)}"


def test_config_schema_imports_no_runtime_module():
    """The schema validates with pure validators and models: no server, store or process code."""
    allowed = {
        "xtrabackup_provider.core.db.dsn",
        "xtrabackup_provider.core.retention.model",
        "xtrabackup_provider.core.storage.base",
    }
    schema = "xtrabackup_provider.core.config.schema"
    reached: set[str] = set()
    todo = [schema]
    while todo:
        for nxt in GRAPH[todo.pop()]:
            if nxt not in reached:
                reached.add(nxt)
                todo.append(nxt)
    assert reached <= allowed, f"the config schema reaches {sorted(reached - allowed)}"


def test_core_imports_no_airflow():
    for name, path in MODULES.items():
        if name.startswith(f"{PACKAGE}.core"):
            tree = ast.parse(path.read_text())
            names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names] + [
                n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
            ]
            assert not [m for m in names if m.split(".")[0] == "airflow"], f"{name} imports Airflow"


# Moved between the Airflow minors pyproject admits (3.1 has none of them):
# airflow.providers.common.compat.sdk gives each on every minor.
MOVED_IN_AIRFLOW = ("airflow.sdk.exceptions", "airflow.sdk.observability", "airflow.sdk.configuration")


def test_names_that_moved_between_airflow_minors_come_through_common_compat():
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        moved = [
            n.module
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(MOVED_IN_AIRFLOW)
        ]
        assert not moved, f"{name} imports {moved}: use airflow.providers.common.compat.sdk (Airflow 3.1)"


# The documented import paths, old and new: tests/unit/test_public_api.py.


def test_every_operator_module_airflow_registers_imports():
    from xtrabackup_provider.get_provider_info import get_provider_info

    info = get_provider_info()
    for key in ("operators", "sensors", "triggers", "hooks"):
        for entry in info[key]:
            for module in entry["python-modules"]:
                importlib.import_module(module)


_SPAWNERS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}


def test_every_child_process_starts_through_core_common_children():
    """One place builds a child's environment (no passphrase, no cloud credentials): no module of
    the core starts a process any other way."""
    allowed = f"{PACKAGE}.core.common.children"
    offenders = []
    for name, path in MODULES.items():
        if name == allowed or not name.startswith(f"{PACKAGE}.core"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = ast.unparse(node.func.value)
                if (owner == "subprocess" and node.func.attr in _SPAWNERS) or (
                    owner == "os"
                    and node.func.attr.startswith(("system", "exec", "spawn", "popen", "posix_spawn"))
                ):
                    offenders.append(f"{name}:{node.lineno} {ast.unparse(node.func)}")
    assert offenders == [], f"processes started outside {allowed}: {offenders}"
