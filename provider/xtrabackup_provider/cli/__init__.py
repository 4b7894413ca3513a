"""The `xtrabackup-provider` command line: the same core as the operators, for when Airflow is
down. `main` dispatches to one module per group of commands (backups, binlogs, fleet)."""

from .main import main

__all__ = ["main"]
