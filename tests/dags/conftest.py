"""Fixtures for the shipped DAGs under dag.test(): a one-host fleet on real components."""

from __future__ import annotations

import json

import pytest
import yaml

from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


@pytest.fixture
def fleet(mariadb, s3_server, bucket, gpg_keys, tmp_path, monkeypatch, airflow_home):
    """A one-host fleet config and the Airflow connections it names, all pointing at real components."""
    config = {
        "storage": {
            "bucket": bucket,
            "prefix": "backups",
            "aws_conn_id": "aws_test",
            "storage_class": {"full": "STANDARD_IA", "incremental": "STANDARD"},
        },
        "encryption": {"gpg_conn_id": "backup_gpg_test"},
        # The sandbox is tiny, so an incremental is a large share of the full: keep the ratio out of the way.
        "policy": {"max_chain_length": 2, "max_incremental_ratio": 5.0},
        "clusters": [
            {
                "name": "dagtest",
                "schedule": None,
                "hosts": [{"name": "db1", "mysql_conn_id": "mysql_dagtest"}],
            }
        ],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("XTRABACKUP_FLEET_CONFIG", str(path))
    monkeypatch.setenv(
        "AIRFLOW_CONN_MYSQL_DAGTEST",
        json.dumps(
            {
                "conn_type": "mysql",
                "host": "127.0.0.1",
                "port": mariadb.port,
                "login": "root",
                "password": mariadb.root_password,
                "extra": {"unix_socket": str(mariadb.socket)},
            }
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_BACKUP_GPG_PRIVATE",
        json.dumps(
            {
                "conn_type": "gpgkeys",
                "password": gpg_keys.passphrase,
                "extra": {"private_key": gpg_keys.private_key},
            }
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_BACKUP_GPG_TEST",
        json.dumps(
            {
                "conn_type": "gpgkeys",
                "extra": {"public_keys": [gpg_keys.public_key]},
            }
        ),
    )
    catalog = Catalog(
        S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket), "backups", "dagtest", "db1"
    )
    return mariadb, catalog
