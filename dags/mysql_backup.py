"""Airflow DAG file: backups of each cluster's hosts, then retention and copies (xtrabackup_provider.dags.backup).

Written by `xtrabackup-provider install-dags`; the DAGs are built by the installed package from the
fleet config: $XTRABACKUP_FLEET_CONFIG, else fleet.yaml in this folder.
"""

from xtrabackup_provider.dags.backup import build_dags

globals().update(build_dags(__file__))
