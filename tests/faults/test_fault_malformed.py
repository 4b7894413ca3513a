"""Malformed and hostile input ends in one error line, never a traceback, and never in a restore
that silently drops data: values at the calendar's and MariaDB's edges, configs YAML or pydantic
would accept too easily, store content that passes a schema but breaks what is built on it, and
a stream whose path escapes the target.

Real components: the CLI's own entry point in a new process, a directory store, mbstream, zstd,
mariabackup, and the binlog reader on real files.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
import yaml
import zstandard

from helpers import cli, xbstream
from manifest_factory import make_manifest
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog, BinlogManifest, BinlogSegment
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest, StoredObject
from xtrabackup_provider.core.pipeline.process import PipelineError
from xtrabackup_provider.core.restore.chain import RestoreRequest, restore
from xtrabackup_provider.core.storage.local import LocalStore

CLUSTER, HOST, UUID = "c1", "db1", "mariadb-db1-3306-1"


def _no_traceback(name: str, proc: subprocess.CompletedProcess[str], flag: str) -> str:
    """Exit 2 with the error on its last line (argparse's or ours), naming `flag`; no traceback."""
    assert proc.returncode == 2, f"{name}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, f"{name} printed a traceback:\n{proc.stderr[-3000:]}"
    last = proc.stderr.rstrip().splitlines()[-1]
    assert "error: " in last and flag in last, f"{name}: {last}"
    assert not [line for line in proc.stderr.splitlines() if line.startswith("error: ") and line != last]
    return last


# -- values at the edges ------------------------------------------------------------------------------

EDGE_VALUES = [
    ("--to-time", "0001-01-01T00:00:00+01:00"),
    ("--to-time", "9999-12-31T23:59:59-01:00"),
    ("--at", "0001-01-01T00:00:00+01:00"),
    ("--at", "9999-12-31T23:00:00-05:00"),
    ("--to-gtid", "4294967296-1-1"),
    ("--to-gtid", "0-4294967296-1"),
    ("--to-gtid", "0-1-18446744073709551616"),
    ("--to-gtid", "0-1-4\u00b2"),
    ("--to-position", "mysql-bin.000001:\u0664\u0662"),
    ("--backup-id", "x" * 5000),
]


@pytest.mark.parametrize(("flag", "value"), EDGE_VALUES, ids=[f"{f} {v[:30]}" for f, v in EDGE_VALUES])
def test_values_at_the_calendars_and_mariadbs_edges_are_one_error_line(flag, value, tmp_path):
    store = ["--local-path", str(tmp_path / "store"), "--cluster", CLUSTER, "--host", HOST]
    if flag == "--at":
        argv = ["retention", "plan", *store, flag, value]
    else:
        argv = ["restore", *store, "--target-datadir", str(tmp_path / "restored"), flag, value]
    _no_traceback(flag, cli(*argv), flag)
    assert not (tmp_path / "restored").exists()


# -- configs that YAML and the schema used to accept -----------------------------------------------------


def _config(**over: object) -> dict:
    body: dict = {
        "storage": {"local_path": "/nonexistent/store"},
        "encryption": {"enabled": False},
        "clusters": [{"name": CLUSTER, "hosts": [{"name": HOST, "socket": "/nonexistent/mysqld.sock"}]}],
    }
    body.update(over)
    return body


CONFIGS = {
    "not UTF-8": (
        b"storage:\n  local_path: /srv/sauvegard\xe9es\nclusters: [{name: c1, hosts: [{name: db1}]}]\n",
        "not UTF-8 text",
    ),
    "duplicate key": (
        b"storage: {local_path: /srv/a}\nstorage: {local_path: /srv/b}\nclusters: [{name: c1, hosts: [{name: db1}]}]\n",
        "found key 'storage' twice",
    ),
    "infinite days": (
        yaml.safe_dump(_config(policy={"full_every_days": float("inf")})).encode(),
        "full_every_days",
    ),
    "1e300 ratio": (
        yaml.safe_dump(_config(policy={"max_incremental_ratio": 1e300})).encode(),
        "max_incremental_ratio",
    ),
    "1e300 hours": (
        yaml.safe_dump(
            _config(
                clusters=[
                    {
                        "name": CLUSTER,
                        "hosts": [
                            {"name": HOST, "socket": "/x.sock", "checksum_gate": {"max_age_hours": 1e300}}
                        ],
                    }
                ]
            )
        ).encode(),
        "max_age_hours",
    ),
    "nan minutes": (
        yaml.safe_dump(
            _config(
                clusters=[
                    {
                        "name": CLUSTER,
                        "hosts": [
                            {
                                "name": HOST,
                                "socket": "/x.sock",
                                "checksum_gate": {"wait_minutes": float("nan")},
                            }
                        ],
                    }
                ]
            )
        ).encode(),
        "wait_minutes",
    ),
    "binlog storage class": (
        yaml.safe_dump(
            _config(
                clusters=[
                    {"name": CLUSTER, "binlogs": {"storage_class": "GLACIERX"}, "hosts": [{"name": HOST}]}
                ]
            )
        ).encode(),
        "binlogs.storage_class",
    ),
    "prefix with ..": (
        yaml.safe_dump(
            _config(storage={"local_path": "/nonexistent/store", "prefix": "backups/../../etc"})
        ).encode(),
        "storage.prefix",
    ),
    "5,000-character prefix": (
        yaml.safe_dump(_config(storage={"local_path": "/nonexistent/store", "prefix": "p" * 5000})).encode(),
        "storage.prefix",
    ),
}


@pytest.mark.parametrize("case", CONFIGS)
def test_config_mistakes_yaml_or_the_schema_used_to_accept_are_one_error_line(case, tmp_path):
    body, mention = CONFIGS[case]
    path = tmp_path / "fleet.yaml"
    path.write_bytes(body)
    proc = cli("backup", "--config", str(path), "--cluster", CLUSTER, "--host", HOST)
    line = _no_traceback(case, proc, mention)
    assert line.startswith(f"error: {path}: "), line


@pytest.mark.parametrize(
    ("flag", "value"), [("--cluster", "../c1"), ("--host", "db 1"), ("--prefix", "a//b"), ("--prefix", "..")]
)
def test_a_bad_flag_value_is_named_by_its_flag_not_a_field_path(flag, value, tmp_path):
    argv = {"--cluster": CLUSTER, "--host": HOST, "--local-path": str(tmp_path / "store")}
    argv[flag] = value
    line = _no_traceback(flag, cli("list", *[a for kv in argv.items() for a in kv]), flag)
    assert "clusters.0" not in line and "storage." not in line, line


# -- store content that passes a schema --------------------------------------------------------------------


def _store_object(catalog: Catalog, key: str, data: bytes) -> StoredObject:
    catalog.store.put_bytes(key, data)
    return StoredObject(
        key=key,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        raw_size=len(data),
        compression="zstd",
        encryption="none",
    )


def _binlog_manifest(catalog: Catalog, name: str, raw: bytes, gtid_last: str) -> BinlogManifest:
    bcat = BinlogCatalog(catalog, UUID)
    obj = _store_object(catalog, bcat.object_key(name, False), zstandard.ZstdCompressor().compress(raw))
    when = datetime(2026, 11, 1, 1, tzinfo=UTC)
    return BinlogManifest(
        name=name,
        cluster=CLUSTER,
        host=HOST,
        server_uuid=UUID,
        server_id=1,
        complete=True,
        size=len(raw),
        sha256=hashlib.sha256(raw).hexdigest(),
        events=3,
        first_event_time=when,
        last_event_time=when + timedelta(hours=1),
        covers_until=when + timedelta(hours=1),
        gtid_first="0-1-11",
        gtid_last=gtid_last,
        segments=[
            BinlogSegment(offset=0, raw_size=len(raw), raw_sha256=hashlib.sha256(raw).hexdigest(), object=obj)
        ],
        shipped_at=when + timedelta(hours=2),
    )


def _mariabackup(bid: str, **over: object) -> Manifest:
    return make_manifest(
        bid,
        engine_flavour="mariabackup",
        engine_version="10.11.19",
        engine_major="10.11",
        server_uuid=UUID,
        binlog_file="mysql-bin.000001",
        binlog_position=4,
        gtid="0-1-10",
        **over,
    )


def _hostile(good: Manifest, bid: str, **changes: object) -> bytes:
    body = json.loads(good.to_json())
    key = body["objects"][0]["key"].replace(good.backup_id, bid)
    body.update(backup_id=bid, chain_root=bid, **changes)
    body["objects"][0]["key"] = key
    return json.dumps(body).encode()


def test_store_content_that_passes_a_schema_breaks_neither_listing_nor_pitr(tmp_path):
    """Beside a good backup and its shipped binlog: newer manifests with a naive time, a malformed
    GTID, binlog file or a negative position; an older chain whose manifest is garbage; a stray
    JSON file and a binlog manifest whose last GTID is not one, in the binlog directory."""
    store = tmp_path / "store"
    catalog = Catalog(LocalStore(str(store)), "backups-prod", CLUSTER, HOST)
    junk = b"not a zstd stream" * 64
    good = _mariabackup("20261101T000000Z-full", size=len(junk))
    catalog.store.put_bytes(good.backup_object.key, junk)
    catalog.write(good)
    hostile = {
        "20261102T000000Z-full": {"started_at": "2026-11-02T00:00:00", "finished_at": "2026-11-02T00:05:00"},
        "20261103T000000Z-full": {"gtid": "0-1-x"},
        "20261104T000000Z-full": {"binlog_file": "../../etc/passwd"},
        "20261105T000000Z-full": {"binlog_position": -5},
    }
    for bid, changes in hostile.items():
        catalog.store.put_bytes(catalog.manifest_key(bid), _hostile(good, bid, **changes))
    catalog.store.put_bytes(catalog.manifest_key("20261001T000000Z-full"), b"\x00garbage")  # an older chain
    bcat = BinlogCatalog(catalog, UUID)
    bcat.write_manifest(_binlog_manifest(catalog, "mysql-bin.000001", b"\xfebin" + b"\x00" * 60, "0-1-20"))
    bad = _binlog_manifest(catalog, "mysql-bin.000002", b"\xfebin" + b"\x01" * 60, "0-1-30")
    catalog.store.put_bytes(bcat.manifest_key(bad.name), bad.to_json().replace(b'"0-1-30"', b'"garbage"'))
    catalog.store.put_bytes(f"{bcat.prefix}/notes.json", b'{"note": "copied by hand"}')

    flags = ["--local-path", str(store), "--prefix", "backups-prod", "--cluster", CLUSTER, "--host", HOST]
    listing = cli("binlogs", "list", *flags)
    assert listing.returncode == 1 and "Traceback" not in listing.stderr, listing.stderr[-3000:]
    assert "mysql-bin.000001" in listing.stdout, listing.stdout
    assert "notes.json" in listing.stderr and "mysql-bin.000002.json" in listing.stderr, listing.stderr

    for target in (["--to-time", "2026-11-01T01:30:00Z"], ["--to-gtid", "0-1-15"]):
        proc = cli("restore", *flags, "--target-datadir", str(tmp_path / "restored"), *target)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        # Planned from the good backup, its binlog fetched: it fails only on the backup object itself.
        last = proc.stderr.rstrip().splitlines()[-1]
        assert good.backup_object.key in last and "zstd could not decompress" in last, last
        assert not (tmp_path / "restored").exists()


# -- a stream whose path escapes the target ----------------------------------------------------------------

CHECKPOINTS = b"backup_type = full-backuped\nfrom_lsn = 0\nto_lsn = 1234\nlast_lsn = 1234\n"


@pytest.mark.parametrize(
    ("files", "mention"),
    [
        (
            [
                ("first", b"1"),
                ("../evil", b"x"),
                ("xtrabackup_checkpoints", CHECKPOINTS),
                ("ibdata1", b"\0" * 16384),
            ],
            "invalid filename ../evil",
        ),
        (  # more than the pipes hold after it: zstd dies of the broken pipe when mbstream stops
            [
                ("first", b"1"),
                ("../evil", b"x"),
                ("xtrabackup_checkpoints", CHECKPOINTS),
                ("ibdata1", os.urandom(8 << 20)),
            ],
            "invalid filename ../evil",
        ),
        ([("first", b"1"), ("ibdata1", b"\0" * 16384)], "extracted no xtrabackup_checkpoints"),
    ],
    ids=["path escapes the target", "... with 8 MiB after it", "no checkpoints"],
)
def test_a_stream_that_mbstream_extracts_only_in_part_fails_the_restore(files, mention, tmp_path):
    """mbstream -x skips a file whose path would escape the target, says "invalid filename", stops
    extracting and exits 0: every later file would be silently missing from the restore."""
    catalog = Catalog(LocalStore(str(tmp_path / "store")), "backups-prod", CLUSTER, HOST)
    stream = zstandard.ZstdCompressor().compress(xbstream(files))
    good = _mariabackup("20261101T000000Z-full")
    obj = _store_object(catalog, good.backup_object.key, stream)
    catalog.write(Manifest.model_validate(json.loads(good.to_json()) | {"objects": [obj.model_dump()]}))

    target = tmp_path / "restore" / "data"
    with pytest.raises(PipelineError) as excinfo:
        restore(RestoreRequest(catalog=catalog, target_datadir=target))
    message = str(excinfo.value)
    assert mention in message and good.backup_object.key in message, message
    assert (
        not target.exists()
        and not (tmp_path / "evil").exists()
        and not (tmp_path / "restore" / "evil").exists()
    )
    assert [p.name for p in (tmp_path / "restore").iterdir()] == [], "scratch left behind"


# -- a binlog file whose header claims more than the file holds --------------------------------------------


def test_a_33_byte_binlog_claiming_a_4_gib_event_is_read_without_allocating_it(tmp_path):
    header = (0).to_bytes(4, "little") + bytes([163]) + (1).to_bytes(4, "little")  # a GTID list event...
    header += (
        (0xFFFFFFFF).to_bytes(4, "little") + (0).to_bytes(4, "little") + (0).to_bytes(2, "little")
    )  # of 4 GiB
    path = tmp_path / "mysql-bin.000001"
    path.write_bytes(b"\xfebin" + header + b"\x00" * 10)
    assert path.stat().st_size == 33
    code = (
        "import resource, sys; from pathlib import Path\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from xtrabackup_provider.core.binlog.events import summarize\n"
        "print(summarize(Path(sys.argv[1])).size)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["0"], proc.stdout  # no complete event
