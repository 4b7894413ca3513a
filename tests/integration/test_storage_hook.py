"""The Airflow side of the upload memory bound: an `aws` connection's extra `upload_memory_mib`
reaches the store the operators write through (core/storage/partplan.py), and a bad value is one
line naming the connection. Real moto over HTTP, the amazon provider's S3Hook."""

from __future__ import annotations

import json
import os

import pytest

from xtrabackup_provider.core.storage.base import MiB
from xtrabackup_provider.core.storage.s3 import S3Store
from xtrabackup_provider.hooks.storage import BackupStorageHook


def _connection(monkeypatch: pytest.MonkeyPatch, s3_server, conn_id: str, **extra: object) -> None:
    conn = json.loads(s3_server.airflow_connection_json())
    conn["extra"].update(extra)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def test_the_connections_upload_memory_bounds_the_store_the_operators_write_through(
    monkeypatch, s3_server, bucket
):
    _connection(monkeypatch, s3_server, "aws_small", upload_memory_mib=64)
    store = BackupStorageHook("aws_small", bucket).get_store()
    assert isinstance(store, S3Store) and store.part_limits.memory == 64 * MiB
    data = os.urandom(3 * MiB) * 9  # 27 MiB: a multipart upload of several parts
    writer = store.open_writer("c1/db1/blob")
    for i in range(0, len(data), MiB):
        writer.write(data[i : i + MiB])
    writer.commit()
    assert b"".join(store.read_chunks("c1/db1/blob")) == data

    _connection(monkeypatch, s3_server, "aws_plain")
    assert BackupStorageHook("aws_plain", bucket).get_s3_store().part_limits.memory == 512 * MiB


@pytest.mark.parametrize("value", ["lots", 8, True, -1])
def test_a_bad_upload_memory_in_the_connection_is_one_line_naming_it(monkeypatch, s3_server, bucket, value):
    _connection(monkeypatch, s3_server, "aws_bad", upload_memory_mib=value)
    with pytest.raises(
        ValueError, match=r"connection 'aws_bad': extra upload_memory_mib=.* must be a whole number"
    ):
        BackupStorageHook("aws_bad", bucket).get_store()
