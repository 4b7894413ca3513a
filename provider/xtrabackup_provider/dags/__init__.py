"""The shipped DAGs, built from the fleet config by the factories of this package.

A user's dags folder holds one short file per kind (`xtrabackup-provider install-dags` writes
them), each calling its module's `build_dags(__file__)`, so an upgrade of the package changes
the DAGs without touching the dags folder. The fleet config is $XTRABACKUP_FLEET_CONFIG, else
`fleet.yaml` next to the DAG file (core.config.load.config_path): never a path inside the
installed package. A bad config is an import error of the DAG file that names the file and the
field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.config.load import load_config
from ..core.config.schema import FleetConfig

if TYPE_CHECKING:
    from airflow.sdk import DAG

__all__ = ["fleet_dags"]


def fleet_dags(dag_file: str, build: Callable[[FleetConfig], Iterable[DAG]]) -> dict[str, DAG]:
    """{dag_id: DAG} of `build(config)` for the config of `dag_file`, each DAG located in that
    file (Airflow's code view and dag.test() look there, not in this package)."""
    config = load_config(dags_folder=Path(dag_file).parent)
    dags = {}
    for dag in build(config):
        dag.fileloc = str(dag_file)
        dags[dag.dag_id] = dag
    return dags
