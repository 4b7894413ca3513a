"""The chaos run's standby DAGs (copied into the run's DAG folder as chaos_standby.py): one per
cluster, keeping a standby of the backed-up replica's newest chain on that host's worker with the
shipped XtraBackupStandbyOperator, every few minutes."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import yaml
from airflow.sdk import DAG

from xtrabackup_provider.operators.standby import XtraBackupStandbyOperator

_config = yaml.safe_load(Path(os.environ["XTRABACKUP_FLEET_CONFIG"]).read_text())
for _cluster in os.environ.get("XBP_CHAOS_CLUSTERS", "").split(","):
    if not _cluster:
        continue
    with DAG(
        f"chaos_standby_{_cluster}",
        schedule="*/6 * * * *",
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=True,
    ) as dag:
        XtraBackupStandbyOperator(
            task_id="standby",
            cluster=_cluster,
            host="r1",
            bucket=_config["storage"]["bucket"],
            aws_conn_id=_config["storage"]["aws_conn_id"],
            standby_dir=os.path.join(os.environ["XBP_CHAOS_STANDBY_ROOT"], _cluster),
            queue=f"{_cluster}-r1",
        )
    globals()[dag.dag_id] = dag
