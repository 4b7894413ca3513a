"""Fixtures for the shipped DAGs under dag.test(): a one-host fleet on real components."""

from __future__ import annotations

import json

import pytest
import yaml

from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


@pytest.fixture(scope="session", autouse=True)
def one_execution_api():
    """One in-process Execution API app for all of the session's tasks, as one api-server serves a
    deployment's. dag.test() on Airflow 3.1 and 3.2 builds a new app per task: its Cadwyn versioned
    routes cost 2-3 s of CPU each time (most of these suites' time on 3.1, py-spy showed). Airflow
    3.3 caches it itself (apache/airflow#65235: `lru_cache` on `in_process_api_server`); this does
    the same on the older minors."""
    from airflow.sdk.execution_time import supervisor

    if hasattr(supervisor.in_process_api_server, "cache_clear"):
        yield  # cached upstream
        return
    api = supervisor.in_process_api_server()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(supervisor, "in_process_api_server", lambda: api)
        yield


@pytest.fixture(scope="session", autouse=True)
def newer_botocore_backoff():
    """botocore's backoff after a connection error as botocore 1.44 (Airflow 3.3's pins) has it:
    50 ms * 2**attempt instead of 1 s * 2**attempt (each capped at 20 s). The pins for Airflow 3.1
    and 3.2 hold botocore 1.42, whose backoff made each call to a storage target that is down (the
    tests stop an endpoint on purpose) wait about 50 s through its 8 attempts: 2-3 minutes for one
    task. The attempts, the refused connections and the error the product sees are the same; only
    the sleeps between them shrink, and only where no response came (so never for throttling)."""
    from botocore.retries import standard

    backoff = standard.ExponentialBackoff
    if hasattr(backoff, "_DEFAULT_BACKOFF_CONFIG"):
        yield  # botocore with the newer backoff
        return
    older = backoff.delay_amount

    def delay_amount(self, context):
        delay = older(self, context)
        return delay * 0.05 if context.http_response is None else delay

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(backoff, "delay_amount", delay_amount)
        yield


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
