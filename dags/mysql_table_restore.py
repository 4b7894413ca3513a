"""Airflow DAG file: tables restored under new names, by hand (xtrabackup_provider.dags.table_restore).

Written by `xtrabackup-provider install-dags`; the DAGs are built by the installed package from the
fleet config: $XTRABACKUP_FLEET_CONFIG, else fleet.yaml in this folder.
"""

from xtrabackup_provider.dags.table_restore import build_dags

globals().update(build_dags(__file__))
