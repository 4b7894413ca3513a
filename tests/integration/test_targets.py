"""Every read path with more than one storage target, through the CLI as an on-call DBA runs it
(docs/RUNBOOK.md): the primary target on one moto endpoint, the copy `offsite` on another (each its
own ThreadedMotoServer, so stopping one is an endpoint that is down); real MariaDB, mariabackup,
mbstream, gpg, mariadb-binlog.

One history is built once (a full, an incremental, binlogs shipped past a known GTID, all copied
to offsite) in two pristine buckets; each test gets its own copies of them. Then:
- the primary endpoint stopped: list, binlogs list / events, verify, check, restore, PITR and
  restore-test read the copy, with a warning or a note, never nothing;
- the incremental damaged on the primary so that exactly one stage notices (gpg: a flipped byte
  in the MDC; mbstream: a consistent re-encryption of a stream with a corrupted chunk): plain
  restore and PITR fetch it from offsite with one note, the data equal to the source's;
- a binlog damaged on the primary: PITR fetches it from offsite;
- `--target-store offsite` with the primary endpoint stopped: nothing mentions the primary;
- the primary bucket emptied: `copy --from offsite --to primary` puts the chains and binlogs back
  (a second run copies nothing), and a restore and a PITR from the primary equal the source.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import struct
import subprocess
import sys
import tempfile
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import (
    GpgKeys,
    S3Server,
    add_orders,
    execute_unlogged,
    gpg_home,
    restored_checksums,
    run_gpg,
    seed_database,
    unique_name,
)
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog, server_uuids
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.storage.s3 import S3Store

RUN = "import sys; from xtrabackup_provider.cli.main import main; sys.exit(main(sys.argv[1:]))"
# mariadbd is in /usr/sbin; the suite's PATH first (make test-mariadb-11.8: the 11.8 server's own tools)
PATH = f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/bin:/sbin:/bin"
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def endpoints() -> Iterator[tuple[S3Server, S3Server]]:
    """The primary's endpoint and offsite's: two moto servers (one in-process backend)."""
    primary, offsite = S3Server(), S3Server()
    primary.start()
    offsite.start()
    try:
        yield primary, offsite
    finally:
        primary.stop()
        offsite.stop()


@dataclass
class Fleet:
    config: Path
    tmp: Path
    passphrase: str
    primary: Catalog
    offsite: Catalog
    endpoint: S3Server  # the primary's
    buckets: tuple[str, str]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **ENV,
            "XTRABACKUP_GPG_PASSPHRASE": self.passphrase,
            "PATH": PATH,
            "HOME": str(self.tmp),
        }
        proc = subprocess.run(
            [sys.executable, "-c", RUN, *args], capture_output=True, text=True, env=env, timeout=900
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    def host(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A host command: `args[0]` (and `args[1]` for binlogs, standby) then the config, cluster, host."""
        verb = list(args[:2]) if args[0] in ("binlogs", "standby") else [args[0]]
        rest = args[len(verb) :]
        return self.cli(*verb, "--config", str(self.config), "--cluster", "c1", "--host", "db1", *rest)

    def primary_down(self) -> Any:
        return _stopped(self.endpoint)


class _stopped:
    def __init__(self, server: S3Server) -> None:
        self.server = server

    def __enter__(self) -> None:
        self.server.stop()

    def __exit__(self, *exc: object) -> None:
        self.server.start()


def write_fleet(
    tmp: Path,
    server: SandboxServer,
    endpoints: tuple[S3Server, S3Server],
    buckets: tuple[str, str],
    keys: GpgKeys,
    workdir: Path,
) -> Fleet:
    """`workdir`: the restore tests' scratch (short: their sandbox's socket path lives in it)."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "public.asc").write_text(keys.public_key)
    (tmp / "private.asc").write_text(keys.private_key)
    primary, offsite = endpoints
    config = tmp / "fleet.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"bucket": buckets[0], "endpoint_url": primary.endpoint_url, "prefix": "backups"},
                "copies": [
                    {
                        "name": "offsite",
                        "bucket": buckets[1],
                        "endpoint_url": offsite.endpoint_url,
                        "prefix": "far",
                        "copy_attempts": 1,
                    }
                ],
                "encryption": {
                    "public_key_files": [str(tmp / "public.asc")],
                    "private_key_file": str(tmp / "private.asc"),
                },
                "policy": {"max_incremental_ratio": 10.0},
                "clusters": [
                    {
                        "name": "c1",
                        "binlogs": {},
                        "restore_workdir": str(workdir),
                        "hosts": [
                            {
                                "name": "db1",
                                "defaults_file": str(server.write_client_defaults(tmp / "client.cnf")),
                            }
                        ],
                    }
                ],
            }
        )
    )
    return Fleet(
        config,
        tmp,
        keys.passphrase,
        Catalog(S3Store(primary.client(), buckets[0]), "backups", "c1", "db1"),
        Catalog(S3Store(offsite.client(), buckets[1]), "far", "c1", "db1"),
        primary,
        buckets,
    )


@dataclass
class History:
    server: SandboxServer
    db: str
    full: str
    inc: str
    at_inc: dict[str, int]  # table checksums when the incremental was taken
    gtid: str  # a GTID after the incremental, before the newest writes
    at_gtid: dict[str, int]  # table checksums at that GTID
    pristine: tuple[str, str]
    keys: GpgKeys


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="xbp-rt"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def history(mariadb_factory, endpoints, gpg_keys, tmp_path_factory) -> History:
    server = mariadb_factory("targets", root_password=secrets.token_urlsafe(16))
    buckets = (
        endpoints[0].make_bucket(f"xbp-pristine-p-{uuid.uuid4().hex[:10]}"),
        endpoints[1].make_bucket(f"xbp-pristine-o-{uuid.uuid4().hex[:10]}"),
    )
    tmp = tmp_path_factory.mktemp("pristine")
    fleet = write_fleet(tmp, server, endpoints, buckets, gpg_keys, tmp)
    db = unique_name("targets")
    seed_database(server, db, rows=1000)
    full = _backup(fleet)
    add_orders(server, db, 300)
    inc = _backup(fleet)
    at_inc = table_checksums(server, [db])
    add_orders(server, db, 150)
    gtid = str(server.query("SELECT @@gtid_binlog_pos")[0][0])
    at_gtid = table_checksums(server, [db])
    add_orders(server, db, 150)  # after the target: a PITR must stop before these
    shipped = fleet.host("binlogs", "ship", "--flush")
    assert shipped.returncode == 0, shipped.stderr
    assert fleet.primary.backup_ids() == [full, inc] == fleet.offsite.backup_ids()
    assert _binlogs(fleet.offsite) == _binlogs(fleet.primary) != set()
    return History(server, db, full, inc, at_inc, gtid, at_gtid, buckets, gpg_keys)


@pytest.fixture
def fleet(history, endpoints, tmp_path, short_dir) -> Fleet:
    """Fresh buckets holding the history (so each test may damage or empty its primary)."""
    buckets = (f"xbp-p-{uuid.uuid4().hex[:12]}", f"xbp-o-{uuid.uuid4().hex[:12]}")
    client = endpoints[0].client()
    for source, copy in zip(history.pristine, buckets, strict=True):
        client.create_bucket(Bucket=copy)
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=source):
            for obj in page.get("Contents", []):
                client.copy_object(
                    Bucket=copy, Key=obj["Key"], CopySource={"Bucket": source, "Key": obj["Key"]}
                )
    return write_fleet(tmp_path, history.server, endpoints, buckets, history.keys, short_dir)


def _backup(fleet: Fleet) -> str:
    proc = fleet.host("backup")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("\t")[0]


def _shipped(catalog: Catalog) -> list[Any]:
    return [m for u in server_uuids(catalog) for m in BinlogCatalog(catalog, u).index().shipped()]


def _binlogs(catalog: Catalog) -> set[str]:
    return {m.name for m in _shipped(catalog)}


def _notes(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith("note: ")]


def _restored(fleet: Fleet, name: str, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    target = fleet.tmp / name / "data"
    return fleet.host("restore", "--target-datadir", str(target), "--create-parents", *args), target


def _checksums(fleet: Fleet, history: History, datadir: Path, server_id: int) -> dict[str, int]:
    return restored_checksums(datadir, fleet.tmp / f"sb-{server_id}", [history.db], server_id=server_id)


# -- damage ------------------------------------------------------------------------------------------


def _replace(catalog: Catalog, key: str, data: bytes) -> None:
    store = catalog.store
    assert isinstance(store, S3Store)
    store.client.put_object(Bucket=store.bucket, Key=key, Body=data)


def damage_gpg_mdc(catalog: Catalog, key: str) -> None:
    """Flip the object's last byte: inside gpg's modification detection code, so the data decrypts,
    decompresses and extracts whole and only gpg fails ("encrypted message has been manipulated")."""
    data = bytearray(catalog.store.get_bytes(key))
    data[-1] ^= 0x01
    _replace(catalog, key, bytes(data))


def damage_chunk_reencrypted(catalog: Catalog, key: str, keys: GpgKeys) -> None:
    """Decrypt and decompress the object, flip one byte inside an xbstream payload, compress and
    encrypt it again to the same recipient at the same size: gpg and zstd accept it, and only
    mbstream fails (`xb_stream_read_chunk(): invalid checksum`)."""
    stored = catalog.store.get_bytes(key)
    with gpg_home() as home:
        (home / "key.asc").write_text(keys.private_key)
        run_gpg(home, "--import", str(home / "key.asc"), passphrase=keys.passphrase)
        (home / "in.gpg").write_bytes(stored)
        compressed = run_gpg(home, "--decrypt", str(home / "in.gpg"), passphrase=keys.passphrase).stdout
        stream = subprocess.run(
            ["zstd", "-d", "-c"], input=compressed, capture_output=True, check=True
        ).stdout
        bad = subprocess.run(
            ["zstd", "-19", "-c"], input=_corrupt_payload(stream), capture_output=True, check=True
        ).stdout
        pad = len(compressed) - len(bad)  # filled by a zstd skippable frame (8 bytes at least)
        for _ in range(5):
            assert pad >= 8, "the corrupted stream compresses larger than the original"
            frame = struct.pack("<II", 0x184D2A50, pad - 8) + bytes(pad - 8)
            again = subprocess.run(
                ["gpg", "--homedir", str(home), "--batch", "--no-tty", "--quiet", "--trust-model", "always"]
                + ["--compress-algo", "none", "--encrypt", "--recipient", keys.fingerprint, "--output", "-"],
                input=bad + frame,
                capture_output=True,
                check=True,
            ).stdout
            if len(again) == len(stored):
                break
            pad -= len(again) - len(stored)
    assert len(again) == len(stored) and again != stored
    _replace(catalog, key, again)


def _corrupt_payload(stream: bytes) -> bytes:
    """The xbstream with one byte flipped in the middle of a payload chunk ('P', 64 bytes or more,
    its CRC32 checked first so that it is a real chunk)."""
    at = 0
    while (at := stream.find(b"XBSTCK01", at)) >= 0:
        _flags, kind, path_len = struct.unpack_from("<BBI", stream, at + 8)
        head = at + 14 + path_len
        if kind == ord("P") and head + 20 <= len(stream):
            length, _offset, crc = struct.unpack_from("<QQI", stream, head)
            payload = stream[head + 20 : head + 20 + length]
            if length >= 64 and len(payload) == length and zlib.crc32(payload) == crc:
                out = bytearray(stream)
                out[head + 20 + length // 2] ^= 0xFF
                return bytes(out)
        at += 8
    raise AssertionError("no payload chunk in the stream")


DAMAGE = {
    "gpg-notices": lambda catalog, key, keys: damage_gpg_mdc(catalog, key),
    "mbstream-notices": damage_chunk_reencrypted,
}
NOTICED = {
    "gpg-notices": "encrypted message has been manipulated",
    "mbstream-notices": "invalid checksum",
}


# -- the primary endpoint down ---------------------------------------------------------------------------


def test_with_the_primary_down_list_binlogs_verify_and_check_show_the_copy(fleet, history):
    with fleet.primary_down():
        listing = fleet.host("list")
        assert listing.returncode == 1, listing.stdout + listing.stderr
        rows = [line.split() for line in listing.stdout.splitlines()[1:]]
        assert [(r[0], r[-1]) for r in rows] == [(history.full, "offsite"), (history.inc, "offsite")], (
            listing.stdout
        )
        assert "WARNING: storage target primary" in listing.stderr and "Cannot reach" in listing.stderr

        binlogs = fleet.host("binlogs", "list")
        assert binlogs.returncode == 1, binlogs.stdout + binlogs.stderr
        assert {line.split()[0] for line in binlogs.stdout.splitlines() if ".0000" in line} == _binlogs(
            fleet.offsite
        )
        assert "WARNING: storage target primary" in binlogs.stderr

        events = fleet.host("binlogs", "events", "--kind", "INSERT", "--table", "orders")
        assert events.returncode == 0, events.stderr
        assert len(events.stdout.splitlines()) == 2, events.stdout  # the two batches after the incremental
        assert "note: " in events.stderr and "storage target primary" in events.stderr

        verified = fleet.host("verify", "--deep")
        assert verified.returncode == 1, verified.stdout + verified.stderr
        ok = sorted(line.split()[1] for line in verified.stdout.splitlines() if line.split()[2:3] == ["OK"])
        assert ok == [history.full, history.inc], verified.stdout
        assert "cannot verify" in verified.stdout and "primary" in verified.stdout

        checked = fleet.cli("check", "--config", str(fleet.config), "--json")
        [host] = json.loads(checked.stdout)
        assert host["newest_restorable"] == history.inc, checked.stdout
        assert host["restorable_from"] == ["offsite"], checked.stdout
        assert host["targets"]["primary"]["error"] and host["targets"]["offsite"]["backups"] == 2
        line = fleet.cli("check", "--config", str(fleet.config)).stdout
        assert f"newest restorable backup {history.inc}" in line and "(from offsite)" in line, line
        assert "no restorable backup" not in line and "storage target primary" in line


def test_with_the_primary_down_restore_and_pitr_read_the_copy(fleet, history):
    with fleet.primary_down():
        proc, target = _restored(fleet, "plain")
        assert proc.returncode == 0, proc.stderr
        assert f"from target offsite into {target}" in proc.stdout
        [note] = _notes(proc)
        assert "primary" in note and "Cannot reach" in note, proc.stdout
        assert _checksums(fleet, history, target, 941) == history.at_inc

        proc, target = _restored(fleet, "pitr", "--to-gtid", history.gtid)
        assert proc.returncode == 0, proc.stderr
        [note] = _notes(proc)
        assert "primary" in note and "Cannot reach" in note, proc.stdout
        assert f"GTID {history.gtid}" in proc.stdout
        assert _checksums(fleet, history, target, 942) == history.at_gtid


def test_with_the_primary_down_restore_test_reads_the_copy_and_reports_there(fleet, history):
    with fleet.primary_down():
        proc = fleet.host("restore-test", "--level", "full")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"{history.inc} (full) passed" in proc.stdout
        assert any("storage target primary" in n for n in _notes(proc)), proc.stdout
    report = json.loads(
        fleet.offsite.store.get_bytes(fleet.offsite.object_key(history.inc, "restore-report.json"))
    )
    assert report["verdict"] == "pass" and report["source"] == "offsite"
    roll = next(r for r in report["results"] if r["name"] == "roll_forward")
    assert roll["status"] == "pass" and "replayed" in roll["note"], roll


# -- damaged on the primary, intact on the copy ----------------------------------------------------------


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("kind", ["plain", "pitr"])
def test_a_damaged_incremental_on_the_primary_is_fetched_from_the_copy(fleet, history, damage, kind):
    key = fleet.primary.get(history.inc).backup_object.key
    DAMAGE[damage](fleet.primary, key, history.keys)
    args = ["--to-gtid", history.gtid] if kind == "pitr" else []
    proc, target = _restored(fleet, kind, *args)
    assert proc.returncode == 0, proc.stderr
    [note] = _notes(proc)
    assert note.startswith(f"note: backup {history.inc}: fetched from target offsite because primary: "), note
    assert NOTICED[damage] in note and "differs from the manifest's" in note, note
    expected = history.at_gtid if kind == "pitr" else history.at_inc
    assert _checksums(fleet, history, target, 943) == expected


def test_a_damaged_binlog_on_the_primary_is_fetched_from_the_copy(fleet, history):
    # the newest complete binlog holds the writes after the incremental: the PITR needs it
    binlog = [m for m in _shipped(fleet.primary) if m.complete][-1]
    damage_gpg_mdc(fleet.primary, binlog.segments[0].object.key)
    proc, target = _restored(fleet, "pitr", "--to-gtid", history.gtid)
    assert proc.returncode == 0, proc.stderr
    [note] = _notes(proc)
    assert note.startswith(f"note: binlog {binlog.name}: fetched from target offsite because primary: "), note
    assert _checksums(fleet, history, target, 944) == history.at_gtid


# -- --target-store: that target alone -------------------------------------------------------------------


def test_target_store_offsite_never_touches_the_primary(fleet, history):
    primary_marks = (fleet.buckets[0], fleet.endpoint.endpoint_url)
    runs: dict[str, subprocess.CompletedProcess[str]] = {}
    with fleet.primary_down():
        runs["pitr"], pitr = _restored(fleet, "pitr", "--target-store", "offsite", "--to-gtid", history.gtid)
        runs["restore"], plain = _restored(fleet, "plain", "--target-store", "offsite")
        runs["list"] = fleet.host("list", "--target-store", "offsite")
        runs["binlogs list"] = fleet.host("binlogs", "list", "--target-store", "offsite")
        runs["verify"] = fleet.host("verify", "--target-store", "offsite")
    for name, proc in runs.items():
        assert proc.returncode == 0, f"{name}: {proc.stdout}{proc.stderr}"
        said = proc.stdout + proc.stderr
        assert not [m for m in primary_marks if m in said], f"{name} touched the primary: {said}"
        assert not _notes(proc), f"{name}: {proc.stdout}"
    assert _checksums(fleet, history, plain, 945) == history.at_inc
    assert _checksums(fleet, history, pitr, 946) == history.at_gtid


# -- the primary lost its data: re-seed it from the copy ---------------------------------------------------


def test_copy_from_offsite_reseeds_an_emptied_primary(fleet, history):
    store = fleet.primary.store
    assert isinstance(store, S3Store)
    store.delete([info.key for info in store.list("")])
    assert fleet.primary.backup_ids() == [] and _binlogs(fleet.primary) == set()

    seeded = fleet.host("copy", "--from", "offsite", "--to", "primary", "--json")
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    [report] = json.loads(seeded.stdout)
    assert report["target"] == "primary" and report["copied_count"] == 2 and report["binlogs_copied"] > 0
    assert fleet.primary.backup_ids() == [history.full, history.inc]
    assert _binlogs(fleet.primary) == _binlogs(fleet.offsite)
    assert fleet.primary.get(history.inc).copy_of.target == "offsite"

    again = fleet.host("copy", "--from", "offsite", "--to", "primary", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    [report] = json.loads(again.stdout)
    assert (report["copied_count"], report["binlogs_copied"], report["bytes"]) == (0, 0, 0)

    listing = fleet.host("list")
    assert listing.returncode == 0, listing.stdout + listing.stderr
    assert [line.split()[-1] for line in listing.stdout.splitlines()[1:]] == ["primary,offsite"] * 2
    verified = fleet.host("verify", "--target-store", "primary", "--deep")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    proc, target = _restored(fleet, "plain", "--target-store", "primary")
    assert proc.returncode == 0 and not _notes(proc), proc.stdout + proc.stderr
    assert _checksums(fleet, history, target, 947) == history.at_inc
    proc, target = _restored(fleet, "pitr", "--target-store", "primary", "--to-gtid", history.gtid)
    assert proc.returncode == 0 and not _notes(proc), proc.stdout + proc.stderr
    assert _checksums(fleet, history, target, 948) == history.at_gtid


def test_copy_deep_puts_back_objects_damaged_in_place_on_the_primary(fleet, history):
    damage_gpg_mdc(fleet.primary, fleet.primary.get(history.inc).backup_object.key)
    binlog = next(m for m in _shipped(fleet.primary) if m.complete)
    damage_gpg_mdc(fleet.primary, binlog.segments[0].object.key)

    def reseed(*extra: str) -> dict[str, Any]:
        proc = fleet.host("copy", "--from", "offsite", "--to", "primary", "--json", *extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        [report] = json.loads(proc.stdout)
        return report

    quick = reseed()  # the same sizes: HEAD cannot tell
    assert (quick["copied_count"], quick["binlogs_copied"]) == (0, 0)
    deep = reseed("--deep")
    assert (deep["copied"], deep["binlogs_copied"]) == ([history.inc], 1)
    again = reseed("--deep")
    assert (again["copied_count"], again["binlogs_copied"]) == (0, 0)

    proc, target = _restored(fleet, "pitr", "--target-store", "primary", "--to-gtid", history.gtid)
    assert proc.returncode == 0 and not _notes(proc), proc.stdout + proc.stderr
    assert _checksums(fleet, history, target, 949) == history.at_gtid


def test_with_the_primary_down_restore_table_reads_the_copy(fleet, history, short_dir):
    table, copy = f"{history.db}.orders", f"{history.db}.orders_back"
    try:
        with fleet.primary_down():
            proc = fleet.host(
                "restore-table",
                "--table",
                table,
                "--as",
                copy,
                "--to-gtid",
                history.gtid,
                "--scratch-dir",
                str(short_dir),
            )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        [note] = _notes(proc)
        assert "storage target primary" in note and "Cannot reach" in note, proc.stdout
        restored = table_checksums(history.server, [history.db])[copy]
        assert restored == history.at_gtid[table]
    finally:
        execute_unlogged(history.server, f"DROP TABLE IF EXISTS {copy}")


def test_with_the_primary_down_pitr_from_the_standby_rolls_forward_over_the_copy(fleet, history, short_dir):
    standby = short_dir / "standby"
    refreshed = fleet.host("standby", "refresh", "--standby-dir", str(standby))
    assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr
    with fleet.primary_down():
        proc, target = _restored(fleet, "pitr", "--from-standby", str(standby), "--to-gtid", history.gtid)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"from standby {standby}" in proc.stdout and f"GTID {history.gtid}" in proc.stdout
    [note] = _notes(proc)
    assert "storage target primary" in note and "Cannot reach" in note, proc.stdout
    assert _checksums(fleet, history, target, 950) == history.at_gtid


def test_with_the_primary_down_standby_refresh_and_glacier_restore_read_the_copy(fleet, history, short_dir):
    standby = short_dir / "standby"
    with fleet.primary_down():
        refreshed = fleet.host("standby", "refresh", "--standby-dir", str(standby))
        glacier = fleet.host("glacier-restore", "--json")
    assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr
    assert f"holds {history.inc} (chain {history.full}), read from target offsite" in refreshed.stdout
    [note] = _notes(refreshed)
    assert "storage target primary" in note and "Cannot reach" in note, refreshed.stdout
    assert glacier.returncode == 0, glacier.stdout + glacier.stderr
    states = json.loads(glacier.stdout)
    assert {s["state"] for s in states} == {"readable"} and all(s["key"].startswith("far/") for s in states)
    assert "note: " in glacier.stderr and "storage target primary" in glacier.stderr
    proc, target = _restored(fleet, "standby", "--from-standby", str(standby))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _checksums(fleet, history, target, 951) == history.at_inc


def test_with_the_primary_down_report_shows_the_copy_and_target_store_reads_it_alone(fleet, history):
    out = fleet.tmp / "report.html"
    report = ["report", "--config", str(fleet.config), "--cluster", "c1", "--out", str(out)]
    with fleet.primary_down():
        fallen = fleet.cli(*report)
        alone = fleet.cli(*report, "--target-store", "offsite")
    assert fallen.returncode == 1, fallen.stdout + fallen.stderr  # a warning: the first target is down
    assert fallen.stdout.startswith("db1\t2 backup(s)\tlast verified restore:"), fallen.stdout
    assert "WARNING: db1: storage target primary cannot be read" in fallen.stderr, fallen.stderr
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert alone.stdout.startswith("db1\t2 backup(s)") and not alone.stderr, alone.stdout + alone.stderr
    page = out.read_text()
    assert history.inc in page and fleet.buckets[1] in page and fleet.buckets[0] not in page
