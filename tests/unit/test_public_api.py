"""The public API is what docs/EXTENDING.md and docs/OPERATORS.md name: each name imports from the
path the docs give and is in its module's `__all__` (and `__all__` names nothing the docs do
not). The import paths of 0.1.0 keep working for a release, each with a DeprecationWarning that
names the new path."""

from __future__ import annotations

import importlib
import re
import warnings
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "docs" / "EXTENDING.md", ROOT / "docs" / "OPERATORS.md"]
PACKAGE = "xtrabackup_provider"
_FROM_IMPORT = re.compile(r"^\s*from (xtrabackup_provider[\w.]*) import ([\w, ()]+)", re.M)
_HEADING = re.compile(r"^### `(xtrabackup_provider[\w.]+)`$", re.M)
# A dotted name in the text: `core.engine.tools.Capabilities.for_version`, `queue=xtrabackup_provider.policy.X`
_DOTTED = re.compile(r"(?<![\w/.])((?:xtrabackup_provider|core)(?:\.\w+)+)")


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            return None  # not a module: an attribute of its parent
        raise


def _resolve(dotted: str) -> tuple[str, str | None]:
    """`core.engine.tools.Capabilities.for_version` -> (module, first name in it) as the docs mean
    it; a module alone -> (module, None)."""
    parts = (dotted if dotted.startswith(PACKAGE) else f"{PACKAGE}.{dotted}").split(".")
    for cut in range(len(parts), 0, -1):
        if _module(".".join(parts[:cut])) is not None:
            return ".".join(parts[:cut]), (parts[cut] if cut < len(parts) else None)
    raise AssertionError(f"{dotted}: no module of it imports")


def documented() -> dict[str, set[str]]:
    """{module: names}: the `from X import a, b` lines of the pages' examples (EXTENDING.md's
    "The public API" lists every name) and the reference's headings (`### `module.Name``)."""
    found: dict[str, set[str]] = {}
    for page in PAGES:
        text = page.read_text()
        pairs = [(m, n.strip("() ")) for m, names in _FROM_IMPORT.findall(text) for n in names.split(",")]
        pairs += [tuple(h.rsplit(".", 1)) for h in _HEADING.findall(text)]
        for module, name in pairs:
            found.setdefault(module, set()).add(name)
    return found


# The 0.1.0 import paths (docs/EXTENDING.md and docs/OPERATORS.md of 0.1.0) -> where they are now.
OLD_PATHS = {
    "xtrabackup_provider.core.backup.BackupRequest": "xtrabackup_provider.core.backup.run.BackupRequest",
    "xtrabackup_provider.core.backup.run_backup": "xtrabackup_provider.core.backup.run.run_backup",
    "xtrabackup_provider.core.catalog.Catalog": "xtrabackup_provider.core.catalog.backups.Catalog",
    "xtrabackup_provider.core.mysql.MySQLTarget": "xtrabackup_provider.core.db.server.MySQLTarget",
    "xtrabackup_provider.core.storage.S3Store": "xtrabackup_provider.core.storage.s3.S3Store",
    "xtrabackup_provider.core.storage.make_s3_client": "xtrabackup_provider.core.storage.s3.make_s3_client",
    "xtrabackup_provider.core.storage.ObjectStore": "xtrabackup_provider.core.storage.base.ObjectStore",
    "xtrabackup_provider.core.storage.LocalStore": "xtrabackup_provider.core.storage.local.LocalStore",
    "xtrabackup_provider.core.restore.restore": "xtrabackup_provider.core.restore.chain.restore",
    "xtrabackup_provider.core.restore_test.run_restore_test": "xtrabackup_provider.core.restore.restore_test.run_restore_test",
    "xtrabackup_provider.core.standby.update_standby": "xtrabackup_provider.core.restore.standby.update_standby",
    "xtrabackup_provider.core.decision.decide": "xtrabackup_provider.core.backup.decide.decide",
    "xtrabackup_provider.core.engine.Capabilities": "xtrabackup_provider.core.engine.tools.Capabilities",
    "xtrabackup_provider.core.engine.backup_argv": "xtrabackup_provider.core.engine.argv.backup_argv",
    "xtrabackup_provider.core.engine.prepare_argv": "xtrabackup_provider.core.engine.argv.prepare_argv",
    "xtrabackup_provider.core.binlog_catalog.binlogs_needed": "xtrabackup_provider.core.binlog.catalog.binlogs_needed",
    "xtrabackup_provider.operators.s3.BucketLifecycleOperator": "xtrabackup_provider.operators.lifecycle.BucketLifecycleOperator",
    "xtrabackup_provider.operators.s3.GlacierRestoreRequestOperator": "xtrabackup_provider.operators.glacier.GlacierRestoreRequestOperator",
    "xtrabackup_provider.operators.s3.VerifyBackupOperator": "xtrabackup_provider.operators.verify.VerifyBackupOperator",
    "xtrabackup_provider.operators.s3.BackupVerifyFailed": "xtrabackup_provider.operators.verify.BackupVerifyFailed",
    "xtrabackup_provider.operators.s3.GpgEncryptOperator": "xtrabackup_provider.operators.files.GpgEncryptOperator",
    "xtrabackup_provider.operators.s3.BackupUploadOperator": "xtrabackup_provider.operators.files.BackupUploadOperator",
    "xtrabackup_provider.operators._common.skip_unless_branch_chose": "xtrabackup_provider.operators.base.skip_unless_branch_chose",
}
DEPRECATED_MODULES = {
    f"{PACKAGE}.{m}"
    for m in ("core.mysql", "core.restore_test", "core.standby", "core.decision", "core.binlog_catalog")
} | {f"{PACKAGE}.operators.s3", f"{PACKAGE}.operators._common"}


def test_the_pages_name_the_api():
    names = documented()
    assert "XtraBackupOperator" in names[f"{PACKAGE}.operators.backup"]
    assert "run_backup" in names[f"{PACKAGE}.core.backup.run"]  # from an example's import line
    assert "Capabilities" in names[f"{PACKAGE}.core.engine.tools"]  # from `core.engine.tools.Capabilities.x`
    assert sum(len(n) for n in names.values()) > 50


@pytest.mark.parametrize("module", sorted(documented()))
def test_every_documented_name_imports_and_is_in_its_modules_all(module):
    names = documented()[module]
    imported = importlib.import_module(module)
    for name in names:
        assert getattr(imported, name) is not None
    exported = getattr(imported, "__all__", None)
    assert exported is not None, f"{module} has no __all__: its public names are {sorted(names)}"
    assert names <= set(exported), f"{module}.__all__ lacks {sorted(names - set(exported))}"


def test_no_module_exports_what_the_pages_do_not_document():
    names = documented()
    for path in sorted((ROOT / "provider" / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT / "provider").with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        exported = set(getattr(importlib.import_module(module), "__all__", []))
        extra = exported - names.get(module, set())
        assert not extra, (
            f"{module}.__all__ names {sorted(extra)}, which docs/EXTENDING.md does not list under "
            "'The public API': add them there, or leave them out of __all__"
        )


def test_every_dotted_name_in_the_pages_resolves():
    """A page naming `core.x.y.name` (a method or attribute too) names something that exists."""
    for page in PAGES:
        for dotted in set(_DOTTED.findall(page.read_text())):
            if dotted.rsplit(".", 1)[0] in DEPRECATED_MODULES or dotted in OLD_PATHS:
                continue
            module, name = _resolve(dotted)
            rest = dotted.split(".")[len(module.split(".")) - (0 if dotted.startswith(PACKAGE) else 1) :]
            value = importlib.import_module(module)
            for attr in rest:
                value = getattr(value, attr)
            assert name is None or value is not None


def test_extending_lists_every_010_path_it_still_serves():
    text = PAGES[0].read_text()
    for old in OLD_PATHS:
        module, _, name = old.rpartition(".")
        assert f"`{module}." in text, f"docs/EXTENDING.md does not list the 0.1.0 path {old}"


@pytest.mark.parametrize(("old", "new"), sorted(OLD_PATHS.items()))
def test_a_010_import_path_still_works_and_warns_naming_the_new_one(old, new):
    old_module, _, name = old.rpartition(".")
    new_module, _, new_name = new.rpartition(".")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(importlib.import_module(old_module), name)
    assert value is getattr(importlib.import_module(new_module), new_name)
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert any(new in m and f"import it from {new_module}" in m for m in messages), messages
    # `from old import name` as 0.1.0 code wrote it
    exec(f"from {old_module} import {name}", {})  # noqa: S102 - a fixed import line


def test_a_name_that_never_existed_is_still_an_attribute_error():
    with pytest.raises(ImportError, match="cannot import name 'Nope'"):
        exec("from xtrabackup_provider.core.storage import Nope", {})  # noqa: S102
