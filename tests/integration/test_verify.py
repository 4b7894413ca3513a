"""Integrity checks without restoring: quick and deep verify against the moto endpoint, the CLI's
exit status, and the xbstream framing check on streams made by the real mbstream."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import zlib

import pytest
import zstandard

from helpers import add_orders, seed_database, unique_name
from manifest_factory import CLUSTER, HOST, PREFIX, make_manifest
from xtrabackup_provider import cli
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.server import MySQLTarget
from xtrabackup_provider.core.engine.xbstream import XbstreamChecker, XbstreamError
from xtrabackup_provider.core.restore.chain import RestoreRequest, restore
from xtrabackup_provider.core.restore.verify import VerifyRequest, verify
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


def _flip(client, bucket: str, key: str, at: int) -> None:
    data = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[at] ^= 0x01
    client.put_object(Bucket=bucket, Key=key, Body=bytes(data))


def test_verify_passes_a_good_chain_and_a_flipped_byte_is_reported_and_refused(
    mariadb, s3_server, bucket, gpg_keys, tmp_path, capsys
):
    db = unique_name("vf")
    seed_database(mariadb, db, rows=500)
    store = S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket)
    catalog = Catalog(store, "backups", "c1", "db1")
    target = MySQLTarget(socket=str(mariadb.socket), user="root", password=mariadb.root_password)
    full = run_backup(BackupRequest(catalog=catalog, target=target, public_keys=[gpg_keys.public_key]))
    add_orders(mariadb, db, 300)
    inc = run_backup(BackupRequest(catalog=catalog, target=target, public_keys=[gpg_keys.public_key]))
    assert inc.parent_id == full.backup_id

    assert all(r.ok for r in verify(VerifyRequest(catalog))), "quick verify of a good chain"
    deep = verify(
        VerifyRequest(catalog, mode="deep", private_key=gpg_keys.private_key, passphrase=gpg_keys.passphrase)
    )
    assert [r.ok for r in deep] == [True, True], [r.problems for r in deep]
    assert deep[0].objects[0]["raw_bytes"] == full.raw_bytes
    [no_key] = verify(VerifyRequest(catalog, [full.backup_id], mode="deep"))
    assert not no_key.ok and "needs the private key" in no_key.problems[0]

    client = s3_server.client()
    key = inc.backup_object.key
    _flip(client, bucket, key, inc.backup_object.size // 2)
    [quick] = verify(VerifyRequest(catalog, [inc.backup_id]))
    assert quick.ok, "same size, same class: quick mode cannot see a flipped byte"

    key_file = tmp_path / "private.asc"
    key_file.write_text(gpg_keys.private_key)
    argv = [
        "verify",
        "--cluster",
        "c1",
        "--host",
        "db1",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
    ]
    argv += ["--deep", "--private-key-file", str(key_file), "--json"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XTRABACKUP_GPG_PASSPHRASE", gpg_keys.passphrase)
        assert cli.main(argv) == 1, "a damaged backup must give a non-zero exit"
    reports = {r["backup_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert reports[full.backup_id]["ok"] is True
    assert reports[inc.backup_id]["ok"] is False
    problem = " ".join(reports[inc.backup_id]["problems"])
    assert key in problem and "differs from the manifest's: the stored object was altered" in problem, problem

    datadir = tmp_path / "restored" / "data"
    request = RestoreRequest(
        catalog=catalog,
        target_datadir=datadir,
        private_key=gpg_keys.private_key,
        passphrase=gpg_keys.passphrase,
    )
    # Whichever stage notices first (mbstream's chunk checksum, gpg, or the sha256) refuses it.
    with pytest.raises(RuntimeError, match="checksum|sha256|gpg"):
        restore(request)
    assert not datadir.exists() or not any(datadir.iterdir()), "a refused restore must leave the target empty"


# -- the framing check ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_stream(tmp_path_factory) -> bytes:
    """An xbstream made by the real mbstream from three files."""
    src = tmp_path_factory.mktemp("xbs")
    (src / "db").mkdir()
    (src / "xtrabackup_checkpoints").write_text("backup_type = full-backuped\nfrom_lsn = 0\n")
    (src / "ibdata1").write_bytes(hashlib.sha256(b"x").digest() * 40_000)  # 1.25 MiB: several chunks
    (src / "db" / "t.ibd").write_bytes(bytes(range(256)) * 300)
    files = ["xtrabackup_checkpoints", "ibdata1", "db/t.ibd"]
    return subprocess.run(["mbstream", "-c", *files], cwd=src, capture_output=True, check=True).stdout


def _check(data: bytes, piece: int = 7919) -> None:
    checker = XbstreamChecker()
    for at in range(0, len(data), piece):  # odd-sized pieces: chunks straddle every boundary
        checker.feed(data[at : at + piece])
    checker.finish()


def _chunk(path: bytes, payload: bytes, offset: int = 0, kind: bytes = b"P") -> bytes:
    head = b"XBSTCK01" + b"\0" + kind + struct.pack("<I", len(path)) + path
    if kind == b"E":
        return head
    return head + struct.pack("<QQI", len(payload), offset, zlib.crc32(payload)) + payload


def test_the_framing_check_accepts_real_streams_and_names_what_is_wrong(real_stream):
    _check(real_stream)
    first_payload = real_stream.index(b"from_lsn")
    damaged = bytearray(real_stream)
    damaged[first_payload] ^= 0x20
    with pytest.raises(XbstreamError, match="xtrabackup_checkpoints.*CRC32"):
        _check(bytes(damaged))
    with pytest.raises(XbstreamError, match="ends inside a chunk"):
        _check(real_stream[:-100])
    last_eof = real_stream.rindex(b"XBSTCK01")
    with pytest.raises(XbstreamError, match="never closed"):
        _check(real_stream[:last_eof])
    with pytest.raises(XbstreamError, match="bad chunk magic"):
        _check(b"XBSTCK02" + real_stream[8:])
    escape = _chunk(b"../../etc/cron.d/x", b"* * * * * root sh\n")
    with pytest.raises(XbstreamError, match="escape the target"):
        _check(real_stream + escape)
    gap = _chunk(b"db/u.ibd", b"abc") + _chunk(b"db/u.ibd", b"def", offset=10)
    with pytest.raises(XbstreamError, match="offset 10 does not continue the file"):
        _check(real_stream + gap)


def _mariadb_chunk(kind: bytes, path: bytes, rest: bytes = b"", flags: int = 0) -> bytes:
    return b"XBSTCK01" + bytes([flags]) + kind + struct.pack("<I", len(path)) + path + rest


def test_the_framing_check_reads_mariadbs_rename_remove_seek_and_rewrite_chunks(real_stream, tmp_path):
    """mariabackup sends these when DDL runs during the backup; mbstream -x applies them, so the
    framing check must accept what mbstream accepts (it called 'R' an unknown type)."""
    rewrite = _chunk(b"db/v.frm", b"second copy")
    rewrite = rewrite[:8] + bytes([0x02]) + rewrite[9:]  # flag 0x02: opened with truncation
    ddl = (
        _chunk(b"db/a.MAD", b"aria data")
        + _chunk(b"db/a.MAD", b"", kind=b"E")
        + _mariadb_chunk(b"R", b"db/a.MAD", struct.pack("<I", 8) + b"db/b.MAD")
        + _chunk(b"db/gone.frm", b"x")
        + _chunk(b"db/gone.frm", b"", kind=b"E")
        + _mariadb_chunk(b"D", b"db/gone.frm")
        + _chunk(b"db/v.frm", b"first copy")
        + _chunk(b"db/v.frm", b"", kind=b"E")
        + rewrite
        + _chunk(b"db/v.frm", b"", kind=b"E")
        + _chunk(b"db/s.ibd", b"head")
        + _mariadb_chunk(b"S", b"db/s.ibd", struct.pack("<Q", 4096))
        + _chunk(b"db/s.ibd", b"tail", offset=4096)
        + _chunk(b"db/s.ibd", b"", kind=b"E")
    )
    stream = real_stream + ddl
    out = tmp_path / "x"
    out.mkdir()
    done = subprocess.run(["mbstream", "-x", "-C", str(out)], input=stream, capture_output=True)
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert (out / "db/b.MAD").read_bytes() == b"aria data" and not (out / "db/a.MAD").exists()
    assert not (out / "db/gone.frm").exists() and (out / "db/v.frm").read_bytes() == b"second copy"
    _check(stream)  # what mbstream applied, the check accepts
    with pytest.raises(XbstreamError, match="unknown type 0x51 for mariabackup"):
        _check(real_stream + _mariadb_chunk(b"Q", b"db/x"))
    # Sent again without the rewrite flag, mbstream cannot create the file, says so and exits 0:
    # the first copy is what a restore would get. The check refuses such a stream.
    again = _chunk(b"db/w.frm", b"old") + _chunk(b"db/w.frm", b"", kind=b"E") + _chunk(b"db/w.frm", b"new")
    with pytest.raises(XbstreamError, match=r"db/w.frm\): sent again without the rewrite flag"):
        _check(real_stream + again + _chunk(b"db/w.frm", b"", kind=b"E"))
    # mbstream applies neither rename nor remove to a file still open (and exits 0).
    rename_open = _chunk(b"db/o.MAD", b"x") + _mariadb_chunk(
        b"R", b"db/o.MAD", struct.pack("<I", 8) + b"db/p.MAD"
    )
    with pytest.raises(XbstreamError, match=r"db/o.MAD\): a rename chunk for a file still open"):
        _check(real_stream + rename_open + _chunk(b"db/p.MAD", b"", kind=b"E"))
    # The rewrite flag does not let a still open file start over: mbstream says out-of-order chunk.
    reopen = _chunk(b"db/w.frm", b"old") + rewrite.replace(b"db/v.frm", b"db/w.frm")
    with pytest.raises(XbstreamError, match="offset 0 does not continue the file"):
        _check(real_stream + reopen + _chunk(b"db/w.frm", b"", kind=b"E"))


def test_deep_verify_runs_the_framing_check_on_the_decompressed_stream(s3_server, bucket, real_stream):
    """sha256 matches (the stream was bad before it was stored), so only the framing check can tell."""
    store = S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket)
    catalog = Catalog(store, PREFIX, CLUSTER, HOST)
    bad = bytearray(real_stream)
    bad[real_stream.index(b"from_lsn")] ^= 0x20
    for bid, raw in (("20260101T000000Z-full", real_stream), ("20260102T000000Z-full", bytes(bad))):
        stored = zstandard.ZstdCompressor().compress(raw)
        key = f"{PREFIX}/{CLUSTER}/{HOST}/backups/{bid}/backup.xbstream.zst"
        store.put_bytes(key, stored)
        obj = {
            "key": key,
            "size": len(stored),
            "sha256": hashlib.sha256(stored).hexdigest(),
            "raw_size": len(raw),
        }
        obj |= {"compression": "zstd", "encryption": "none"}
        catalog.write(make_manifest(bid, objects=[obj], raw_bytes=len(raw), stored_bytes=len(stored)))
    good, damaged = verify(VerifyRequest(catalog, mode="deep"))
    assert good.ok, good.problems
    assert not damaged.ok
    assert "xbstream framing" in damaged.problems[0] and "CRC32" in damaged.problems[0], damaged.problems
    assert "already bad when the backup stored it" in damaged.problems[0]


def test_quick_verify_reports_missing_and_resized_objects(s3_server, bucket):
    store = S3Store(make_s3_client(s3_server.endpoint_url, "us-east-1"), bucket)
    catalog = Catalog(store, PREFIX, CLUSTER, HOST)
    full = make_manifest("20260101T000000Z-full", size=10)
    inc = make_manifest("20260102T000000Z-inc", parent=full, size=10)
    for m, body in ((full, b"0123456789"), (inc, b"012345678")):
        store.put_bytes(m.backup_object.key, body)
        store.put_bytes(catalog.manifest_key(m.backup_id), m.to_json())  # bypasses write()'s size check
    store.delete([full.backup_object.key])
    a, b = verify(VerifyRequest(catalog))
    assert a.problems == [f"{full.backup_object.key}: missing"]
    assert b.problems == [f"{inc.backup_object.key}: 9 bytes stored, the manifest says 10"]
    assert (
        cli.main(
            [
                "verify",
                "--cluster",
                CLUSTER,
                "--host",
                HOST,
                "--bucket",
                bucket,
                "--prefix",
                PREFIX,
                "--endpoint-url",
                s3_server.endpoint_url,
            ]
        )
        == 1
    )
