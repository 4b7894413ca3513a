"""Airflow DAG file: pt-table-checksum of each cluster with `checksum:` (xtrabackup_provider.dags.table_checksum).

Written by `xtrabackup-provider install-dags`; the DAGs are built by the installed package from the
fleet config: $XTRABACKUP_FLEET_CONFIG, else fleet.yaml in this folder.
"""

from xtrabackup_provider.dags.table_checksum import build_dags

globals().update(build_dags(__file__))
