"""`install-dags`: write the shipped DAG files into a dags folder (Airflow's own by default).

Each file is a few lines calling a factory of the installed package (xtrabackup_provider.dags),
so upgrading the package upgrades the DAGs; the files themselves change only when this template
does, and running the command again after an upgrade rewrites them.
"""

from __future__ import annotations

import argparse
import sys
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
    foreign = [folder / n for n in DAG_FILES if _foreign(folder / n)]
    if foreign and not args.force:
        print(
            f"error: {foreign[0]} exists and was not written by install-dags (a copy of an older "
            "release?); move it away, or pass --force to replace it",
            file=sys.stderr,
        )
        return 2
    for name in DAG_FILES:
        path, text = folder / name, dag_file_text(name)
        if path.is_file() and path.read_text(errors="replace") == text:
            print(f"unchanged {path}")
            continue
        path.write_text(text)
        print(f"wrote {path}")
    config = folder / CONFIG_NAME
    if not config.is_file():
        print(f"next: write the fleet config {config} (or set $XTRABACKUP_FLEET_CONFIG to it)")
    return 0


def _foreign(path: Path) -> bool:
    return path.exists() and MARKER not in path.read_text(errors="replace")
