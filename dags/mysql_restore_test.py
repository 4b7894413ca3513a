"""Airflow DAG file: restore tests of each cluster (xtrabackup_provider.dags.restore_test).

Written by `xtrabackup-provider install-dags`; the DAGs are built by the installed package from the
fleet config: $XTRABACKUP_FLEET_CONFIG, else fleet.yaml in this folder.
"""

from xtrabackup_provider.dags.restore_test import build_dags

globals().update(build_dags(__file__))
