"""A read lease that cannot be written stops the read before anything is downloaded (retention
would not know of it); `without_read_lease` accepts the risk and the log says so. A lease's check
covers the binlogs it names as well as the backups.

Real components: a MariaDB sandbox, mariabackup, gpg, moto over HTTP behind faultkit's S3 proxy,
which refuses (403) every write under the host's leases/ (a worker whose credentials may only read).
"""

from __future__ import annotations

import logging

import pytest
from faultkit import S3Proxy, s3_catalog, target

from helpers import restore_with, restored_checksums
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.catalog import leased_manifest_keys
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.lease import LeaseError, ReadLease
from xtrabackup_provider.core.catalog.manifest import CatalogError
from xtrabackup_provider.core.db.sandbox import table_checksums
from xtrabackup_provider.core.storage.local import LocalStore


@pytest.fixture
def read_only_leases(s3_server):
    proxy = S3Proxy(
        s3_server.endpoint_url,
        rule=lambda op, path: 403 if op == "PutObject" and "/leases/" in path else None,
    )
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def test_an_unwritable_read_lease_stops_the_restore_before_any_download(
    seeded, s3_server, bucket, gpg_keys, read_only_leases, tmp_path, caplog
):
    server, db = seeded
    manifest = run_backup(
        BackupRequest(
            catalog=s3_catalog(s3_server.endpoint_url, bucket),
            target=target(server),
            kind="full",
            public_keys=[gpg_keys.public_key],
        )
    )
    expected = table_checksums(server, [db])
    catalog = s3_catalog(read_only_leases.endpoint_url, bucket)
    datadir = tmp_path / "restored" / "data"
    with pytest.raises(LeaseError) as excinfo:
        restore_with(catalog, gpg_keys, datadir)
    message = str(excinfo.value)
    print("error:", message)
    assert "/leases/" in message and manifest.backup_id in message and "--without-read-lease" in message
    assert not any(
        "/backup.xbstream" in e.path for e in read_only_leases.log if e.operation.startswith("GET ")
    )
    assert not datadir.exists()

    with caplog.at_level(logging.WARNING):
        restore_with(catalog, gpg_keys, datadir, without_read_lease=True)
    assert any("going on without it as asked" in r.getMessage() for r in caplog.records), caplog.text
    assert restored_checksums(datadir, tmp_path / "sb", [db], server_id=953) == expected


def test_a_lease_check_names_a_binlog_deleted_before_the_lease_was_written(tmp_path):
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    kept, gone = "0-uuid-a/mariadb-bin.000007", "0-uuid-a/mariadb-bin.000008"
    open_one = "0-uuid-a/mariadb-bin.000009"  # the open binlog: only its partial manifest is stored
    catalog.store.put_bytes(leased_manifest_keys(catalog, kept)[0], b"{}")
    catalog.store.put_bytes(leased_manifest_keys(catalog, open_one)[1], b"{}")
    lease = ReadLease(
        catalog,
        "point-in-time restore",
        (),
        [kept, gone, open_one],
        binlog_manifest=lambda n: leased_manifest_keys(catalog, n),
    )
    with lease, pytest.raises(CatalogError) as excinfo:
        lease.check()
    print("error:", excinfo.value)
    assert (
        gone in str(excinfo.value) and kept not in str(excinfo.value) and open_one not in str(excinfo.value)
    )
