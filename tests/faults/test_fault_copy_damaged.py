"""A copy task whose source backup is damaged fails, naming the object and both sha256s, instead of
ending green with a warning nobody reads: the backup it was to protect is not restorable there.

Real components: a MariaDB sandbox, mariabackup, gpg, two directory stores; the copy runs through
the shipped CopyBackupsOperator, as the backup DAG's copy task does.
"""

from __future__ import annotations

import hashlib

import pytest
from faultkit import target

from xtrabackup_provider.core.backup.copies import CopyError
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.storage.local import LocalStore
from xtrabackup_provider.operators.copies import CopyBackupsOperator


def test_a_damaged_source_fails_the_copy_task_naming_the_object_and_both_sha256s(seeded, gpg_keys, tmp_path):
    server, _db = seeded
    catalog = Catalog(LocalStore(tmp_path / "first"), "backups", "c1", "db1")
    manifest = run_backup(
        BackupRequest(catalog=catalog, target=target(server), kind="full", public_keys=[gpg_keys.public_key])
    )
    obj = manifest.backup_object
    path = tmp_path / "first" / obj.key
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit flipped on the disk of the first target: same size
    path.write_bytes(bytes(data))
    actual = hashlib.sha256(data).hexdigest()

    task = CopyBackupsOperator(
        task_id="copy_vault",
        cluster="c1",
        host="db1",
        local_path=str(tmp_path / "first"),
        target_name="vault",
        target_local_path=str(tmp_path / "vault"),
        attempts=1,
    )
    with pytest.raises(CopyError) as excinfo:
        task.execute({})
    message = str(excinfo.value)
    print("error:", message)
    assert obj.key in message and obj.sha256 in message and actual in message, message
    assert "vault" in message
    assert Catalog(LocalStore(tmp_path / "vault"), "backups", "c1", "db1").backup_ids() == []
