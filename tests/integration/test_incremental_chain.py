"""A full + five incrementals, encrypted to the S3 endpoint, restored at the end and in the middle.

Real components only: MariaDB sandboxes, mariabackup/mbstream, gpg, and moto over HTTP. One chain
is built per module (the slow part); tests that damage the catalog work on a server-side copy of
it in a bucket of their own.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers import add_orders, restore_with, restored_checksums, seed_database, unique_name
from xtrabackup_provider.core.backup.run import BackupError, BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import CatalogError, Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.db.server import MySQLTarget, server_facts
from xtrabackup_provider.core.pipeline.process import PipelineError
from xtrabackup_provider.core.restore.prepare import PrepareError
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client

SMALL_TABLES = 1000


class RecordingS3Store(S3Store):
    """A real S3Store that records every read: store-level calls and each GetObject sent over HTTP."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.get_bytes_keys: list[str] = []
        self.read_chunks_keys: list[str] = []
        self.http_gets: list[str] = []
        self.client.meta.events.register("before-parameter-build.s3.GetObject", self._on_get_object)

    def _on_get_object(self, params: dict[str, Any], **_kw: Any) -> None:
        self.http_gets.append(params["Key"])

    def get_bytes(self, key: str) -> bytes:
        self.get_bytes_keys.append(key)
        return super().get_bytes(key)

    def read_chunks(self, key: str) -> Iterator[bytes]:
        self.read_chunks_keys.append(key)
        return super().read_chunks(key)


def _catalog(s3_server, bucket: str, store_cls: type[S3Store] = S3Store) -> Catalog:
    store = store_cls(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket)
    return Catalog(store, "backups", "c1", "db1")


def _target(server: SandboxServer) -> MySQLTarget:
    return MySQLTarget(socket=str(server.socket), user="root", password=server.root_password)


def _copy_bucket(s3_server, source: str) -> str:
    """A server-side copy of every object of `source` into a fresh bucket (same keys)."""
    dest = s3_server.make_bucket(unique_name("xbp-copy").replace("_", "-"))
    client = s3_server.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=source):
        for obj in page.get("Contents", []):
            client.copy_object(CopySource={"Bucket": source, "Key": obj["Key"]}, Bucket=dest, Key=obj["Key"])
    return dest


@contextlib.contextmanager
def _captured_logs(name: str) -> Iterator[list[str]]:
    """Messages logged under `name` (works with pytest's logging plugin disabled)."""
    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger(name)
    handler, old_level = _Collect(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


@dataclass
class Chain:
    server: SandboxServer
    bucket: str
    db: str
    many: str
    manifests: list[Manifest]
    states: list[dict[str, int]]  # table_checksums right after each backup, same order as manifests

    @property
    def dbs(self) -> list[str]:
        return [self.db, self.many]

    @property
    def ids(self) -> list[str]:
        return [m.backup_id for m in self.manifests]


def _changes(db: str, many: str) -> list[str]:
    """SQL run before each incremental (1..5)."""
    small_tables = "\n".join(
        f"CREATE TABLE t{i:04d} (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB;"
        f" INSERT INTO t{i:04d} VALUES (1, {i}), (2, {i * 7 % 1000});"
        for i in range(SMALL_TABLES)
    )
    return [
        # 1: inserts and updates
        f"""USE `{db}`;
        INSERT INTO customers SELECT seq, CONCAT('late customer ', seq), NULL, '2026-02-01 00:00:00'
            FROM seq_301_to_340;
        UPDATE customers SET email = CONCAT('moved', id, '@example.org') WHERE id % 3 = 0;
        UPDATE orders SET amount = amount + 1.5, note = CONCAT('upd ', id) WHERE id % 5 = 0;
        UPDATE coupons SET code = UPPER(code) WHERE id <= 50;""",
        # 2: deletes and a new table
        f"""USE `{db}`;
        DELETE FROM orders WHERE id % 7 = 0;
        DELETE FROM customers WHERE id BETWEEN 200 AND 220;
        DELETE FROM audit WHERE id > 20;
        CREATE TABLE products (id INT PRIMARY KEY, sku VARCHAR(32) NOT NULL UNIQUE, price DECIMAL(10,2))
            ENGINE=InnoDB;
        INSERT INTO products SELECT seq, CONCAT('SKU-', seq), seq * 0.25 FROM seq_1_to_800;""",
        # 3: dropped tables (Aria and InnoDB) and an added column
        f"""USE `{db}`;
        DROP TABLE audit;
        DROP TABLE coupons;
        ALTER TABLE customers ADD COLUMN tier TINYINT NOT NULL DEFAULT 1;
        UPDATE customers SET tier = 1 + id % 4 WHERE id % 2 = 0;
        INSERT INTO products SELECT seq, CONCAT('SKU-', seq), NULL FROM seq_801_to_900;""",
        # 4: a thousand small tables in one step
        f"CREATE DATABASE `{many}`; USE `{many}`;\n{small_tables}",
        # 5: a bit of everything after the big step
        f"""USE `{many}`;
        INSERT INTO t0001 VALUES (3, 3), (4, 4);
        UPDATE t0500 SET v = v + 1;
        DELETE FROM t0998 WHERE id = 1;
        DROP TABLE t0999;
        USE `{db}`;
        UPDATE products SET price = price * 2 WHERE id % 10 = 0;
        UPDATE customers SET tier = 9 WHERE id = 7;""",
    ]


@pytest.fixture(scope="module")
def chain(mariadb_factory, s3_server, gpg_keys) -> Iterator[Chain]:
    server = mariadb_factory("chain", root_password=secrets.token_urlsafe(16))
    try:
        db, many = unique_name("shop"), unique_name("many")
        seed_database(server, db, rows=3000)
        server.execute_script(
            f"USE `{db}`; CREATE TABLE coupons (id INT PRIMARY KEY, code VARCHAR(20)) ENGINE=InnoDB;"
            " INSERT INTO coupons SELECT seq, CONCAT('c', seq) FROM seq_1_to_200;"
        )
        bucket = s3_server.make_bucket(unique_name("xbp-chain").replace("_", "-"))
        catalog = _catalog(s3_server, bucket)
        keys = [gpg_keys.public_key]
        manifests = [
            run_backup(BackupRequest(catalog=catalog, target=_target(server), kind="full", public_keys=keys))
        ]
        states = [table_checksums(server, [db, many])]
        for n, sql in enumerate(_changes(db, many), start=1):
            server.execute_script(sql)
            if n == 1:
                add_orders(server, db, 1500)
            req = BackupRequest(catalog=catalog, target=_target(server), kind="incremental", public_keys=keys)
            manifests.append(run_backup(req))
            states.append(table_checksums(server, [db, many]))
        yield Chain(server, bucket, db, many, manifests, states)
    finally:
        mariadb_factory.discard(server)


def _assert_empty_or_absent(path: Path) -> None:
    assert not path.exists() or list(path.iterdir()) == [], f"{path} was written to: {list(path.iterdir())}"


# -- the chain itself ------------------------------------------------------------------------------


def test_manifests_form_a_valid_chain(chain: Chain, s3_server):
    full, *incs = chain.manifests
    assert len(incs) == 5
    assert full.kind == "full" and full.parent_id is None and full.from_lsn == 0
    assert full.chain_root == full.backup_id
    for parent, child in zip(chain.manifests, incs, strict=False):
        assert child.kind == "incremental"
        assert child.parent_id == parent.backup_id
        assert child.from_lsn == parent.to_lsn, f"LSN gap between {parent.backup_id} and {child.backup_id}"
        # MariaBackup's to_lsn is the checkpoint at backup time, so it may stay put while nothing
        # was checkpointed; the copied redo (last_lsn) always moves on when data changed.
        assert child.to_lsn >= child.from_lsn
        assert child.last_lsn > parent.last_lsn, f"{child.backup_id} saw no change although data changed"
        assert child.chain_root == full.backup_id
        assert child.server_uuid == full.server_uuid
        assert child.backup_object.encryption == "gpg"
        assert child.started_at > parent.started_at
    # The catalog agrees, read back from the bucket by a new client.
    catalog = _catalog(s3_server, chain.bucket)
    assert catalog.backup_ids() == chain.ids
    assert [m.backup_id for m in catalog.latest_chain()] == chain.ids
    assert [m.backup_id for m in catalog.chain(chain.ids[2])] == chain.ids[:3]
    # Each recorded state really differs from the previous one: every step changed something.
    for before, after in zip(chain.states, chain.states[1:], strict=False):
        assert before != after


def test_restore_latest_applies_the_whole_chain(chain: Chain, s3_server, gpg_keys, tmp_path):
    catalog = _catalog(s3_server, chain.bucket)
    target = tmp_path / "latest" / "data"
    report = restore_with(catalog, gpg_keys, target)

    assert report.backup_id == chain.ids[-1]
    assert report.chain == chain.ids
    assert report.gtid == chain.manifests[-1].gtid
    # MariaBackup 10.11: --prepare the base, then --prepare --incremental-dir per incremental, in order;
    # never --apply-log-only.
    assert len(report.prepare_argv) == 6
    for argv in report.prepare_argv:
        assert "--prepare" in argv
        assert not any(a.startswith("--apply-log-only") for a in argv), argv
    inc_dirs = [
        next((a for a in argv if a.startswith("--incremental-dir=")), None) for argv in report.prepare_argv
    ]
    assert inc_dirs[0] is None
    assert [d.rsplit("/", 1)[-1] for d in inc_dirs[1:]] == chain.ids[1:]
    assert not list(target.parent.glob(".xbp-restore-*")), "scratch directory left behind"
    assert sorted(p.name for p in target.parent.iterdir()) == ["data"]

    expected = chain.states[-1]
    restored = restored_checksums(target, tmp_path / "sb", chain.dbs)
    assert set(restored) == set(expected)
    assert restored == expected
    assert f"{chain.db}.audit" not in restored and f"{chain.db}.coupons" not in restored
    assert f"{chain.many}.t0999" not in restored
    assert sum(1 for t in restored if t.startswith(f"{chain.many}.")) == SMALL_TABLES - 1


def test_restore_of_a_middle_incremental_matches_that_point(chain: Chain, s3_server, gpg_keys, tmp_path):
    catalog = _catalog(s3_server, chain.bucket)
    third = chain.ids[3]  # the 3rd incremental: tables dropped, column added, no small tables yet
    target = tmp_path / "mid" / "data"
    report = restore_with(catalog, gpg_keys, target, backup_id=third)
    assert report.chain == chain.ids[:4]
    assert len(report.prepare_argv) == 4
    assert not any("--apply-log-only" in a for argv in report.prepare_argv for a in argv)
    assert not list(target.parent.glob(".xbp-restore-*"))

    with SandboxServer.on_datadir(target, tmp_path / "sb", server_id=901) as restored:
        restored.start()
        sums = table_checksums(restored, chain.dbs)
        columns = restored.query(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
            " AND table_name = 'customers' ORDER BY ordinal_position",
            (chain.db,),
        )
        schemas = restored.query(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name = %s", (chain.many,)
        )
    assert sums == chain.states[3]
    assert sums != chain.states[-1]
    assert set(sums) == {f"{chain.db}.{t}" for t in ("customers", "orders", "products")}
    assert [c[0] for c in columns][-1] == "tier"
    assert schemas == [], "the 1,000-table schema of the 4th incremental leaked into the 3rd"


# -- failures are caught before anything is touched ------------------------------------------------


def test_missing_link_fails_before_any_download(chain: Chain, s3_server, gpg_keys, tmp_path):
    bucket = _copy_bucket(s3_server, chain.bucket)
    catalog = _catalog(s3_server, bucket, RecordingS3Store)
    store: RecordingS3Store = catalog.store  # type: ignore[assignment]
    third = chain.ids[3]
    store.delete([catalog.manifest_key(third)])

    target = tmp_path / "restore" / "data"
    with pytest.raises(CatalogError) as excinfo:
        restore_with(catalog, gpg_keys, target)
    message = str(excinfo.value)
    assert third in message and chain.ids[4] in message, message
    assert "missing link" in message

    assert not (tmp_path / "restore").exists(), "restore created the target or a scratch directory"
    assert store.read_chunks_keys == []
    backup_reads = [k for k in store.http_gets if not k.endswith("/manifest.json")]
    assert backup_reads == [], f"backup objects were downloaded: {backup_reads}"
    assert store.http_gets, "the recorder saw no GET at all; it is not wired to the client"
    assert all(k.endswith("/manifest.json") for k in store.get_bytes_keys)

    # The older part of the chain is still restorable from manifests alone.
    assert [m.backup_id for m in catalog.chain(chain.ids[2])] == chain.ids[:3]


def test_tampered_incremental_is_refused_before_prepare_and_older_points_still_restore(
    chain: Chain, s3_server, gpg_keys, tmp_path
):
    bucket = _copy_bucket(s3_server, chain.bucket)
    catalog = _catalog(s3_server, bucket)
    key = chain.manifests[2].backup_object.key  # the 2nd incremental
    original = catalog.store.get_bytes(key)
    # A flipped byte in the middle garbles what gpg streams on (zstd or gpg's MDC catches it); one in
    # the last bytes hits gpg's integrity tag, so only gpg can tell.
    for n, offset in enumerate((len(original) // 2, len(original) - 3)):
        data = bytearray(original)
        data[offset] ^= 0x01
        catalog.store.put_bytes(key, bytes(data))

        target = tmp_path / f"bad{n}" / "data"
        with (
            _captured_logs("xtrabackup_provider.core.restore.prepare") as prepare_logs,
            pytest.raises(PipelineError) as excinfo,
        ):
            restore_with(catalog, gpg_keys, target)
        message = str(excinfo.value)
        assert key in message, (
            f"flip at {offset}: the error does not name the damaged object {key}: {message}"
        )
        assert any(word in message for word in ("sha256", "gpg", "zstd")), message
        assert not any("--prepare" in m for m in prepare_logs), (
            f"prepare ran on a damaged chain: {prepare_logs}"
        )
        _assert_empty_or_absent(target)
        assert not list(target.parent.glob(".xbp-restore-*")), "scratch left behind"

    # The damage is local: the chain up to the 1st incremental does not include that object.
    good = tmp_path / "good" / "data"
    report = restore_with(catalog, gpg_keys, good, backup_id=chain.ids[1])
    assert report.chain == chain.ids[:2]
    assert restored_checksums(good, tmp_path / "sb", chain.dbs) == chain.states[1]


def test_incremental_on_another_servers_chain_is_refused(
    mariadb, mariadb_factory, s3_server, bucket, gpg_keys
):
    db = unique_name("a")
    seed_database(mariadb, db, rows=200)
    catalog = _catalog(s3_server, bucket)
    keys = [gpg_keys.public_key]
    full = run_backup(BackupRequest(catalog=catalog, target=_target(mariadb), kind="full", public_keys=keys))
    objects_before = sorted(o.key for o in catalog.store.list("backups/"))

    other = mariadb_factory("other", root_password=secrets.token_urlsafe(16))
    try:
        other_uuid = server_facts(_target(other)).server_uuid
        assert other_uuid != full.server_uuid
        # Refused when the run decides, before it touches the bucket (BackupError, naming both).
        with pytest.raises(BackupError) as excinfo:
            run_backup(
                BackupRequest(catalog=catalog, target=_target(other), kind="incremental", public_keys=keys)
            )
    finally:
        mariadb_factory.discard(other)
    message = str(excinfo.value)
    assert full.server_uuid in message and other_uuid in message, message
    assert full.backup_id in message, message

    assert catalog.backup_ids() == [full.backup_id], "a manifest was registered for the refused backup"
    assert sorted(o.key for o in catalog.store.list("backups/")) == objects_before
    assert catalog.store.open_multipart_uploads("backups/") == []


# -- prepare failures and scratch --------------------------------------------------------------------


def _failing_tool(tmp_path: Path, fail_on: str) -> tuple[Path, Path]:
    """A mariabackup that logs every call and fails the prepare that applies `fail_on`."""
    log = tmp_path / "calls.log"
    wrapper = tmp_path / "mariabackup"
    real = shutil.which("mariabackup")
    wrapper.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'for a in "$@"; do case "$a" in\n'
        f'  --incremental-dir=*/{fail_on}) echo "InnoDB: simulated failure applying {fail_on}" >&2; exit 1;;\n'
        "esac; done\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper, log


def test_failed_prepare_in_the_middle_of_the_chain_names_the_step_and_leaves_no_trace(
    chain: Chain, s3_server, gpg_keys, tmp_path
):
    """Applied incrementals are removed while later steps run; a later step failing still ends with
    a clear error, an untouched target and no scratch left."""
    catalog = _catalog(s3_server, chain.bucket)
    failing = chain.ids[4]
    tool, calls = _failing_tool(tmp_path, failing)
    target = tmp_path / "restore" / "data"
    with pytest.raises(PrepareError) as excinfo:
        restore_with(catalog, gpg_keys, target, binary=str(tool))
    message = str(excinfo.value)
    assert failing in message and "simulated failure" in message, message
    prepares = [line for line in calls.read_text().splitlines() if "--prepare" in line]
    applied = [re.search(r"--incremental-dir=\S*/([^/\s]+)", p) for p in prepares]
    assert [m.group(1) if m else "base" for m in applied] == [
        "base",
        *chain.ids[1:5],
    ], "prepare went on after the failed step"
    assert not any("--move-back" in line or "--copy-back" in line for line in calls.read_text().splitlines())
    assert not target.exists(), "the target was created although prepare failed"
    assert sorted(p.name for p in (tmp_path / "restore").iterdir()) == [], "scratch left behind"


def test_keep_scratch_keeps_every_extracted_backup(chain: Chain, s3_server, gpg_keys, tmp_path):
    catalog = _catalog(s3_server, chain.bucket)
    target = tmp_path / "restore" / "data"
    scratch = tmp_path / "scratch"
    restore_with(catalog, gpg_keys, target, backup_id=chain.ids[2], scratch_dir=scratch, keep_scratch=True)
    assert sorted(p.name for p in scratch.iterdir()) == chain.ids[:3]
    for inc in chain.ids[1:3]:  # an applied incremental is kept when asked to
        assert (scratch / inc / "xtrabackup_checkpoints").is_file() or any((scratch / inc).iterdir())
    assert restored_checksums(target, tmp_path / "sb", chain.dbs) == chain.states[2]


def test_the_restore_keyring_keeps_the_private_key_passphrase_protected(
    chain: Chain, s3_server, gpg_keys, tmp_path, monkeypatch
):
    """The restore's throwaway agent stores the key under its minimum S2K count (one derivation per
    object): still protected by the passphrase, never in the clear, and wiped afterwards."""
    from xtrabackup_provider.core.restore import chain as restore_mod

    seen: dict[str, bytes] = {}
    homes: list[Path] = []
    real_fetch_one = restore_mod.fetch_one

    def inspecting_fetch_one(*args: Any, **kwargs: Any) -> Any:
        home = args[4].path
        homes.append(home)
        for key in (home / "private-keys-v1.d").glob("*.key"):
            seen[key.name] = key.read_bytes()
        return real_fetch_one(*args, **kwargs)

    monkeypatch.setattr(restore_mod, "fetch_one", inspecting_fetch_one)
    target = tmp_path / "restore" / "data"
    restore_with(
        catalog=_catalog(s3_server, chain.bucket), keys=gpg_keys, target=target, backup_id=chain.ids[1]
    )
    assert seen, "no private key in the restore's GPG home"
    for name, content in seen.items():
        assert b"(protected-private-key" in content and b"(private-key" not in content, name
    assert homes and not any(h.exists() for h in homes), "the restore's GPG home was not wiped"
    assert restored_checksums(target, tmp_path / "sb", chain.dbs) == chain.states[1]
