"""Airflow DAG file: replicas built from backups, by hand (xtrabackup_provider.dags.provision_replica).

Written by `xtrabackup-provider install-dags`; the DAGs are built by the installed package from the
fleet config: $XTRABACKUP_FLEET_CONFIG, else fleet.yaml in this folder.
"""

from xtrabackup_provider.dags.provision_replica import build_dags

globals().update(build_dags(__file__))
