"""XtraBackupPrepareOperator / XtraBackupFinalPrepareOperator run for real with mariabackup.

A full and an incremental are taken into a LocalStore, extracted by hand (zstd -d | mbstream -x),
prepared by the operators, copied back, and the copy is started to compare its data with the source.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from helpers import add_orders, seed_database, unique_name
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.engine.argv import PrepareStep, prepare_argv
from xtrabackup_provider.core.engine.metadata import read_checkpoints
from xtrabackup_provider.core.engine.tools import EngineError, detect_tool
from xtrabackup_provider.core.pipeline.from_store import stream_from_store
from xtrabackup_provider.core.restore.chain import copy_back
from xtrabackup_provider.core.storage.local import LocalStore
from xtrabackup_provider.operators.prepare import XtraBackupFinalPrepareOperator, XtraBackupPrepareOperator

PREPARE_LOGGER = "xtrabackup_provider.core.restore.prepare"


@dataclass
class Backups:
    store: LocalStore
    db: str
    full: Manifest
    incremental: Manifest
    at_full: dict[str, int]
    at_incremental: dict[str, int]


def _target(server: SandboxServer) -> MySQLTarget:
    return MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)


@pytest.fixture(scope="module")
def backups(mariadb_factory, tmp_path_factory) -> Iterator[Backups]:
    server = mariadb_factory("prep", root_password=secrets.token_urlsafe(16))
    try:
        db = unique_name("prep")
        seed_database(server, db, rows=3000)
        store = LocalStore(tmp_path_factory.mktemp("store"))
        catalog = Catalog(store, "backups", "c1", "db1")

        def backup(kind: str) -> Manifest:
            req = BackupRequest(
                catalog=catalog, target=_target(server), kind=kind, allow_unencrypted=True, public_keys=[]
            )
            return run_backup(req)

        full = backup("full")
        at_full = table_checksums(server, [db])
        add_orders(server, db, 2000)
        server.execute_script(
            f"USE `{db}`; UPDATE customers SET email = NULL WHERE id % 4 = 0;"
            " DELETE FROM orders WHERE id % 9 = 0;"
            " ALTER TABLE customers ADD COLUMN vip TINYINT NOT NULL DEFAULT 0;"
            " CREATE TABLE refunds (id INT PRIMARY KEY, order_id BIGINT, amount DECIMAL(12,2)) ENGINE=InnoDB;"
            " INSERT INTO refunds SELECT seq, seq * 3, seq FROM seq_1_to_300;"
        )
        # Backup ids have one-second resolution.
        while datetime.now(UTC).replace(microsecond=0) <= full.started_at.replace(microsecond=0):
            time.sleep(0.05)
        incremental = backup("incremental")
        at_incremental = table_checksums(server, [db])
        assert at_incremental != at_full
        yield Backups(store, db, full, incremental, at_full, at_incremental)
    finally:
        mariadb_factory.discard(server)


def _extract(store: LocalStore, manifest: Manifest, dest: Path) -> Path:
    """zstd -d | mbstream -x -C dest of one stored backup, checked against the manifest's sha256."""
    assert manifest.backup_object.encryption == "none"
    dest.mkdir(parents=True)
    key = manifest.backup_object.key
    result = stream_from_store(
        store.read_chunks(key),
        ["mbstream", "-x", "-C", str(dest)],
        decrypt_argv=None,
        expected_sha256=manifest.backup_object.sha256,
        object_name=key,
    )
    assert result.raw_bytes == manifest.raw_bytes
    return dest


@contextlib.contextmanager
def _prepare_argvs() -> Iterator[list[list[str]]]:
    """The argv of every prepare step run meanwhile, taken from the core's "running ..." log line."""
    argvs: list[list[str]] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("running ") and "--prepare" in message:
                argvs.append(message[len("running ") :].split())

    logger = logging.getLogger(PREPARE_LOGGER)
    handler, old_level = _Collect(logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield argvs
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def _checkpoints_type(directory: Path) -> str:
    return read_checkpoints(directory).backup_type


# What the tool writes after a prepare: MariaBackup 10.5+ records "log-applied" for a complete
# prepare (it has no separate undo phase), XtraBackup "full-prepared".
PREPARED = ("log-applied", "full-prepared")


def test_operators_prepare_full_then_incremental_and_the_copy_matches_the_source(backups: Backups, tmp_path):
    base = _extract(backups.store, backups.full, tmp_path / "base")
    inc = _extract(backups.store, backups.incremental, tmp_path / "inc")
    assert _checkpoints_type(base) == "full-backuped"
    assert _checkpoints_type(inc) == "incremental"

    with _prepare_argvs() as argvs:
        base_result = XtraBackupPrepareOperator(
            task_id="prepare_base", target_dir=str(base), flavour="mariabackup", apply_log_only=True
        ).execute(context={})
        final_result = XtraBackupFinalPrepareOperator(
            task_id="prepare_final", target_dir=str(base), incremental_dir=str(inc), flavour="mariabackup"
        ).execute(context={})

    assert base_result["target_dir"] == str(base)
    assert final_result["final"] is True
    assert len(argvs) == 2, argvs
    for argv in argvs:
        assert argv[0].endswith("mariabackup") and "--prepare" in argv and f"--target-dir={base}" in argv
        assert "--apply-log-only" not in argv, f"MariaBackup 10.5+ must never get --apply-log-only: {argv}"
    assert not any(a.startswith("--incremental-dir") for a in argvs[0])
    assert f"--incremental-dir={inc}" in argvs[1]
    assert _checkpoints_type(base) in PREPARED
    assert read_checkpoints(base).to_lsn == backups.incremental.to_lsn

    tool = detect_tool("mariabackup")
    target = tmp_path / "restored" / "data"
    copy_back(tool, base, target, move=False)
    with SandboxServer.on_datadir(target, tmp_path / "sb", server_id=910) as restored:
        restored.start()
        sums = table_checksums(restored, [backups.db])
        vip = restored.query(
            "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = %s"
            " AND table_name = 'customers' AND column_name = 'vip'",
            (backups.db,),
        )
    assert sums == backups.at_incremental
    assert f"{backups.db}.refunds" in sums
    assert vip == [(1,)]


def test_apply_log_only_is_dropped_on_mariabackup_even_when_asked(backups: Backups, tmp_path):
    base = _extract(backups.store, backups.full, tmp_path / "base")
    inc = _extract(backups.store, backups.incremental, tmp_path / "inc")
    tool = detect_tool("mariabackup")
    assert not tool.capabilities.apply_log_only, f"{tool.text}: expected a MariaBackup 10.5+ on this worker"
    # Asked directly, the engine refuses to build such a step: the operator is what drops the flag.
    with pytest.raises(EngineError, match="apply-log-only"):
        prepare_argv(tool, PrepareStep(str(base), None, apply_log_only=True))

    with _prepare_argvs() as argvs:
        result = XtraBackupPrepareOperator(
            task_id="prepare", target_dir=str(base), flavour="mariabackup", apply_log_only=True
        ).execute(context={})
        # The final operator ignores an explicit apply_log_only too.
        final = XtraBackupFinalPrepareOperator(
            task_id="final",
            target_dir=str(base),
            incremental_dir=str(inc),
            flavour="mariabackup",
            apply_log_only=True,
        )
        assert final.apply_log_only is False
        final.execute(context={})

    assert len(argvs) == 2
    assert all("--apply-log-only" not in argv for argv in argvs), argvs
    assert result["final"] is True  # without --apply-log-only the step is a complete prepare
    assert isinstance(result["use_memory"], int) and result["use_memory"] > 0
    assert any(a == f"--use-memory={result['use_memory']}" for a in argvs[0])
    assert _checkpoints_type(base) in PREPARED
