"""Airflow DAG file: the `check` of each cluster on its schedule (xtrabackup_provider.dags.backup_check).

Written by `xtrabackup-provider install-dags`; the DAGs are built by the installed package from the
fleet config: $XTRABACKUP_FLEET_CONFIG, else fleet.yaml in this folder.
"""

from xtrabackup_provider.dags.backup_check import build_dags

globals().update(build_dags(__file__))
