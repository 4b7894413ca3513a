"""`install-dags`: write the shipped DAG files into a dags folder (Airflow's own by default).

Each file is a few lines calling a factory of the installed package (xtrabackup_provider.dags),
so upgrading the package upgrades the DAGs; the files themselves change only when this template
does, and running the command again after an upgrade rewrites them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..core.config.load import CONFIG_NAME, airflow_dags_folder

MARKER = "Written by `xtrabackup-provider install-dags`"
# file name -> (factory module in xtrabackup_provider.dags, what its DAGs do)
DAG_FILES = {
    "mysql_backup.py": ("backup", "backups of each cluster's hosts, then retention and copies"),
    "mysql_backup_check.py": ("backup_check", "the `check` of each cluster on its schedule"),
    "mysql_binlog_shipping.py": ("binlog_shipping", "binlog shipping of each cluster with `binlogs:`"),
    "mysql_provision_replica.py": ("provision_replica", "replicas built from backups, by hand"),
    "mysql_restore_test.py": ("restore_test", "restore tests of each cluster"),
    "mysql_table_checksum.py": ("table_checksum", "pt-table-checksum of each cluster with `checksum:`"),
    "mysql_table_restore.py": ("table_restore", "tables restored under new names, by hand"),
}
TEMPLATE = '''"""Airflow DAG file: {what} (xtrabackup_provider.dags.{module}).

{marker}; the DAGs are built by the installed package from the
fleet config: $XTRABACKUP_FLEET_CONFIG, else {config} in this folder.
"""

from xtrabackup_provider.dags.{module} import build_dags

globals().update(build_dags(__file__))
'''


def dag_file_text(name: str) -> str:
    module, what = DAG_FILES[name]
    return TEMPLATE.format(what=what, module=module, marker=MARKER, config=CONFIG_NAME)


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("install-dags", help="write the shipped DAG files into a dags folder")
    p.add_argument(
        "--dags-folder",
        type=Path,
        help="where (default: Airflow's dags folder: $AIRFLOW__CORE__DAGS_FOLDER, airflow.cfg, $AIRFLOW_HOME/dags)",
    )
    p.add_argument("--force", action="store_true", help="also replace files install-dags did not write")


def cmd_install_dags(args: argparse.Namespace) -> int:
    folder = args.dags_folder or airflow_dags_folder()
    if not folder.is_dir():
        print(f"error: {folder}: no such directory; create the dags folder first", file=sys.stderr)
        return 2
    found = {name: _existing(folder / name) for name in DAG_FILES}
    for name, (kind, text) in found.items():
        problem = _refusal(folder / name, kind, text, args.force)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    for name, (kind, text) in found.items():
        path = folder / name
        if kind == "file" and text == dag_file_text(name):
            print(f"unchanged {path}")
            continue
        try:
            _replace(path, dag_file_text(name))
        except OSError as exc:
            print(
                f"error: cannot write {path}: {exc.strerror}; check the dags folder's permissions",
                file=sys.stderr,
            )
            return 2
        print(f"wrote {path}")
    config = folder / CONFIG_NAME
    if not config.is_file():
        print(f"next: write the fleet config {config} (or set $XTRABACKUP_FLEET_CONFIG to it)")
    return 0


def _existing(path: Path) -> tuple[str, str]:
    """What is at `path`, never following a link: ("absent" | "link" | "other" | "file", a file's
    text) or ("unreadable", why)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "absent", ""
    if stat.S_ISLNK(mode):
        return "link", ""
    if not stat.S_ISREG(mode):
        return "other", ""  # a directory, a FIFO (reading it would block): never opened
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return "unreadable", exc.strerror or str(exc)
    with os.fdopen(fd, encoding="utf-8", errors="replace") as fh:
        return ("file", fh.read()) if stat.S_ISREG(os.fstat(fd).st_mode) else ("other", "")


def _refusal(path: Path, kind: str, text: str, force: bool) -> str | None:
    """Why install-dags may not replace what is at `path` (None: it may)."""
    if kind == "link" and not force:
        # Put there on purpose (a deployment linking DAGs from elsewhere) or to steer the write to
        # another file: neither is ours to discard, and nothing is ever written where it points.
        return (
            f"{path} is a symbolic link (to {os.readlink(path)}); install-dags writes regular files "
            "and never through a link: remove it, or pass --force to replace the link itself"
        )
    if kind == "unreadable":
        return f"{path}: cannot read it ({text}); check its permissions"
    if kind == "other":
        return f"{path} is not a regular file; move it away"
    if kind == "file" and MARKER not in text and not force:
        return (
            f"{path} exists and was not written by install-dags (a copy of an older release?); move "
            "it away, or pass --force to replace it"
        )
    return None


def _replace(path: Path, text: str) -> None:
    """Write a temp file beside `path` and rename it over `path`: a rename replaces a link itself,
    and the dag processor never parses a half-written file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())  # what a plain write gives (mkstemp: 0600)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
