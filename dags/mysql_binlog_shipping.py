"""Airflow DAG file: binlog shipping of each cluster with `binlogs:` (xtrabackup_provider.dags.binlog_shipping).

Written by `xtrabackup-provider install-dags`; the DAGs are built by the installed package from the
fleet config: $XTRABACKUP_FLEET_CONFIG, else fleet.yaml in this folder.
"""

from xtrabackup_provider.dags.binlog_shipping import build_dags

globals().update(build_dags(__file__))
