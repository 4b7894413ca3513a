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


# -- only our settings reach a tool (issue 27) -------------------------------------------------------------

OPTION_FILE_OPTIONS = ("--no-defaults", "--defaults-file=")


def _built_tool_argvs() -> dict[str, list[str]]:
    """Every tool argv the core's builders make, for both flavours and every mode."""
    from pathlib import Path

    from xtrabackup_provider.core.binlog.ship import download_argv
    from xtrabackup_provider.core.db.checksum import ChecksumOptions, checksum_argv
    from xtrabackup_provider.core.db.sandbox import SandboxServer
    from xtrabackup_provider.core.db.server import MySQLTarget
    from xtrabackup_provider.core.engine.argv import (
        BackupOptions,
        PrepareTuning,
        backup_argv,
        copy_back_argv,
        prepare_argv,
        prepare_steps,
    )
    from xtrabackup_provider.core.engine.tools import ToolVersion
    from xtrabackup_provider.core.pitr.replay import client_argv, reader_argv

    tools = {
        "xtrabackup": ToolVersion("xtrabackup", (8, 0, 35, 33)),
        "mariabackup": ToolVersion("mariabackup", (10, 11, 19, 0)),
    }
    opts = BackupOptions(datadir="/var/lib/mysql", lsn_dir="/l", scratch_dir="/s", incremental_lsn=42)
    built: dict[str, list[str]] = {}
    for name, tool in tools.items():
        built[f"{name} --backup"] = backup_argv(tool, "/c.cnf", opts)
        for n, step in enumerate(prepare_steps(tool, "/base", ["/inc1", "/inc2"])):
            built[f"{name} --prepare #{n}"] = prepare_argv(
                tool, step, PrepareTuning(use_memory_bytes=1 << 30)
            )
        built[f"{name} --copy-back"] = copy_back_argv(tool, "/p", "/d")
        built[f"{name} --move-back"] = copy_back_argv(tool, "/p", "/d", move=True)
    for binary in ("mariadb-binlog", "mysqlbinlog"):
        built[f"{binary} batch"] = download_argv(binary, "/c.cnf", Path("/d"), "mysql-bin.000001")
        built[f"{binary} --stop-never"] = download_argv(
            binary, "/c.cnf", Path("/d"), "mysql-bin.000001", stop_never=True, replica_server_id=7
        )
    built["pt-table-checksum"] = checksum_argv(MySQLTarget(socket="/s.sock"), "/c.cnf", ChecksumOptions())
    for grants in (True, False):
        server = SandboxServer(Path("/b"), Path("/d"), 3306, 1, skip_grant_tables=grants)
        built[f"mariadbd skip_grant_tables={grants}"] = server.server_args()
    built["mariadb-binlog (replay)"] = reader_argv("mariadb-binlog", ["/b/mysql-bin.000001"])
    built["mariadb (replay)"] = client_argv("mariadb", "/c.cnf")
    return built


def test_every_tool_argv_the_core_builds_reads_only_the_options_we_chose():
    """The first option of every MySQL/MariaDB tool names its one option file (ours) or none;
    core/common/children.py refuses anything else at run time as well."""
    from xtrabackup_provider.core.common.children import check_tool_options

    for what, argv in _built_tool_argvs().items():
        check_tool_options(argv)
        if argv[0].startswith("pt-"):  # its own options from no file; the connection's from ours alone (F=)
            assert argv[1] == "--config=/dev/null" and argv[2].endswith(",F=/c.cnf"), argv
        else:
            assert argv[1].startswith(OPTION_FILE_OPTIONS), f"{what}: {argv}"
        assert not [a for a in argv if a.startswith("--defaults-extra-file")], f"{what}: {argv}"


def test_option_file_options_are_only_ever_a_tools_first_option():
    """A list literal in the core that holds --no-defaults or --defaults-file=... holds it right
    after the program (a tool ignores it anywhere else); one that starts with a MySQL program's
    name has it there."""
    from xtrabackup_provider.core.common.children import OPTION_FILE_READERS

    def text(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            return str(node.values[0].value)
        return None

    misplaced = []
    for name, path in MODULES.items():
        if not name.startswith(f"{PACKAGE}.core"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.List) or not node.elts:
                continue
            texts = [text(e) for e in node.elts]
            at = [i for i, t in enumerate(texts) if t and t.startswith(OPTION_FILE_OPTIONS)]
            program = texts[0]
            if at and at != [1] or (program in OPTION_FILE_READERS and at != [1]):
                misplaced.append(f"{name}:{node.lineno} {ast.unparse(node)[:100]}")
    assert misplaced == [], misplaced


def test_no_tool_is_given_a_defaults_extra_file():
    """`--defaults-extra-file` adds a file to the host's option files (~/.my.cnf still wins): it is
    named only where the guard refuses it."""
    root = PROVIDER.parent
    allowed = {PROVIDER / PACKAGE / "core" / "common" / "children.py"}
    found = [
        str(path.relative_to(root))
        for folder in ("provider", "dags", "bench", "scripts")
        for path in (root / folder).rglob("*.py")
        if path not in allowed and "--defaults-extra-file" in path.read_text()
    ]
    assert found == [], f"--defaults-extra-file in {found}"
