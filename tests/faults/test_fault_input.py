"""Bad input gets a clear error and writes nothing: hostile manifests, forged chains, config
mistakes, unusable GPG keys.

Real components: a MariaDB sandbox, mariabackup, gpg, moto over HTTP, and the CLI's own entry point.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from faultkit import ProcScanner, copy_bucket, s3_catalog, snapshot, target, wait_next_second

from helpers import add_orders, gpg_home, restore_with, restored_checksums, run_gpg, unique_name
from xtrabackup_provider import cli
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import MAX_MANIFEST_BYTES, CatalogError, Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.pipeline.gpg import GpgError
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test

HOSTILE_ID = "20991231T235959Z-inc"  # newer than any real backup: "latest" would pick it


@dataclass
class Chain:
    bucket: str
    full: Manifest
    inc: Manifest
    expected: dict[str, int]  # checksums at the incremental
    db: str


@pytest.fixture(scope="module")
def chain(seeded, s3_server, gpg_keys) -> Chain:
    """A real full + incremental, encrypted, in a bucket of its own (tests copy it before damage)."""
    server, db = seeded
    bucket = s3_server.make_bucket(unique_name("xbp-input").replace("_", "-"))
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    keys = [gpg_keys.public_key]
    full = run_backup(BackupRequest(catalog=catalog, target=target(server), kind="full", public_keys=keys))
    add_orders(server, db, 500)
    wait_next_second(full.started_at)
    inc = run_backup(
        BackupRequest(catalog=catalog, target=target(server), kind="incremental", public_keys=keys)
    )
    return Chain(bucket, full, inc, table_checksums(server, [db]), db)


class _Reads:
    """Every GetObject the catalog's client sends over HTTP."""

    def __init__(self, catalog: Catalog) -> None:
        self.keys: list[str] = []
        catalog.store.client.meta.events.register("before-parameter-build.s3.GetObject", self._on_get)

    def _on_get(self, params: dict[str, Any], **_kw: Any) -> None:
        self.keys.append(params["Key"])

    @property
    def backup_objects(self) -> list[str]:
        return [k for k in self.keys if not k.endswith("/manifest.json")]


def _assert_nothing_written(tmp_path: Path) -> None:
    assert not (tmp_path / "restore").exists(), "the restore created its target or scratch directory"


# -- hostile manifests ----------------------------------------------------------------------------------


def _hostile(good: dict[str, Any]) -> Iterator[tuple[str, bytes, str]]:
    """(case, manifest bytes, what the error must mention) for a manifest stored under HOSTILE_ID."""
    own = f"backups/c1/db1/backups/{HOSTILE_ID}/backup.xbstream.zst.gpg"

    def variant(**changes: Any) -> bytes:
        body = copy.deepcopy(good)
        body.update(backup_id=HOSTILE_ID, kind="incremental", parent_id=good["backup_id"])
        body["chain_root"] = good["backup_id"]
        body["objects"][0]["key"] = own
        for path, value in changes.items():
            node = body
            *parents, leaf = path.split("__")
            for p in parents:
                node = node[int(p)] if p.isdigit() else node[p]
            node[int(leaf) if leaf.isdigit() else leaf] = value
        return json.dumps(body).encode()

    yield "wrong type", variant(to_lsn="a lot"), "to_lsn"
    yield "objects not a list", variant(objects="backup.xbstream"), "objects"
    yield (
        "path traversal in key",
        variant(objects__0__key=f"backups/c1/db1/backups/{HOSTILE_ID}/../../../../etc/x"),
        "unsafe object key",
    )
    yield "absolute key", variant(objects__0__key="/etc/shadow"), "unsafe object key"
    yield (
        "NUL in key",
        variant(objects__0__key=f"backups/c1/db1/backups/{HOSTILE_ID}/a\x00b"),
        "unsafe object key",
    )
    yield (
        "another host's object",
        variant(objects__0__key=f"backups/c1/db2/backups/{HOSTILE_ID}/backup.xbstream.zst.gpg"),
        "outside backups/c1/db1/backups/",
    )
    yield "huge LSN", variant(to_lsn=2**80), "to_lsn"
    yield "huge size", variant(objects__0__size=10**30), "size"
    yield "4,000-digit number", variant(server_id=int("9" * 4000)), "server_id"
    yield "deep nesting", b'{"extra": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "recursion limit"
    yield "oversized", variant(decision_reason="x" * (MAX_MANIFEST_BYTES + 1)), "over the"
    yield "not JSON", b"\x89PNG\r\n\x1a\n\x00\x00", "Invalid JSON"
    other = "20991231T235958Z-inc"
    yield (
        "id mismatch",
        variant(backup_id=other, objects__0__key=own.replace(HOSTILE_ID, other)),
        "it was copied or tampered with",
    )
    yield "copied from another host", variant(host="db2"), "it was copied or tampered with"


HOSTILE_CASES = ["wrong type", "objects not a list", "path traversal in key", "absolute key", "NUL in key",
                 "another host's object", "huge LSN", "huge size", "4,000-digit number", "deep nesting",
                 "oversized", "not JSON", "id mismatch", "copied from another host"]  # fmt: skip


@pytest.fixture(scope="module")
def good_manifest(chain, s3_server) -> dict[str, Any]:
    catalog = s3_catalog(s3_server.endpoint_url, chain.bucket)
    return json.loads(catalog.store.get_bytes(catalog.manifest_key(chain.inc.backup_id)))


@pytest.mark.parametrize("case", HOSTILE_CASES)
def test_hostile_manifest_is_refused_by_name_and_nothing_is_downloaded_or_written(
    case, chain, good_manifest, s3_server, gpg_keys, tmp_path
):
    body, mention = next((b, m) for c, b, m in _hostile(good_manifest) if c == case)
    bucket = copy_bucket(s3_server, chain.bucket)
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    key = catalog.manifest_key(HOSTILE_ID)
    catalog.store.put_bytes(key, body)
    reads = _Reads(catalog)

    # Listing keeps working and names the bad manifest.
    problems: list[str] = []
    assert [m.backup_id for m in catalog.manifests(problems)] == [chain.full.backup_id, chain.inc.backup_id]
    assert len(problems) == 1 and key in problems[0] and mention in problems[0], problems

    # Restoring it, by id or as "latest", is a clear error naming it; nothing is fetched or written.
    for backup_id in (HOSTILE_ID, None):
        with pytest.raises(CatalogError) as excinfo:
            restore_with(catalog, gpg_keys, tmp_path / "restore" / "data", backup_id=backup_id)
        assert key in str(excinfo.value) and mention in str(excinfo.value), str(excinfo.value)
    assert reads.backup_objects == []
    _assert_nothing_written(tmp_path)

    # The good chain beside it is still restorable: its plan does not trip over the bad neighbour.
    assert [m.backup_id for m in catalog.chain(chain.inc.backup_id)] == [
        chain.full.backup_id,
        chain.inc.backup_id,
    ]


def test_cli_lists_and_restores_the_good_chain_despite_hostile_neighbours(
    chain, good_manifest, s3_server, gpg_keys, tmp_path, capsys, monkeypatch
):
    bucket = copy_bucket(s3_server, chain.bucket)
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    for n, (_case, body, _m) in enumerate(_hostile(good_manifest)):
        catalog.store.put_bytes(catalog.manifest_key(f"20991231T2359{n:02d}Z-inc"), body)
    key_file = tmp_path / "private.asc"
    key_file.write_text(gpg_keys.private_key)
    key_file.chmod(0o600)
    monkeypatch.setenv("XTRABACKUP_GPG_PASSPHRASE", gpg_keys.passphrase)
    common = [
        "--cluster",
        "c1",
        "--host",
        "db1",
        "--bucket",
        bucket,
        "--endpoint-url",
        s3_server.endpoint_url,
    ]

    assert cli.main(["list", *common, "--json"]) == 1  # listed, with the problems named
    listed = json.loads(capsys.readouterr().out)
    assert [b["backup_id"] for b in listed["backups"]] == [chain.full.backup_id, chain.inc.backup_id]
    assert len(listed["problems"]) == len(HOSTILE_CASES)

    target_dir = tmp_path / "restore" / "data"
    argv = [
        "restore",
        *common,
        "--backup-id",
        chain.inc.backup_id,
        "--target-datadir",
        str(target_dir),
        "--create-parents",
    ]
    assert cli.main([*argv, "--private-key-file", str(key_file)]) == 0, capsys.readouterr().err
    assert restored_checksums(target_dir, tmp_path / "sb", [chain.db], server_id=970) == chain.expected


# -- forged chains --------------------------------------------------------------------------------------


def _forge_inc(s3_server, chain: Chain, **changes: Any) -> tuple[Catalog, str]:
    bucket = copy_bucket(s3_server, chain.bucket)
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    body = json.loads(catalog.store.get_bytes(catalog.manifest_key(chain.inc.backup_id)))
    body.update(changes)
    catalog.store.put_bytes(catalog.manifest_key(chain.inc.backup_id), json.dumps(body).encode())
    return catalog, f"{chain.full.backup_id} -> {chain.inc.backup_id}"


@pytest.mark.parametrize(
    ("changes", "mention"),
    [
        (lambda inc: {"from_lsn": inc.from_lsn + 1}, "LSN gap in link"),
        (lambda inc: {"server_uuid": "mariadb-elsewhere-3306-9"}, "backups of different servers"),
        (lambda inc: {"engine_major": "8.0", "engine_flavour": "xtrabackup"}, "engine changed"),
        (lambda inc: {"chain_root": inc.backup_id}, "chain root"),
    ],
    ids=["mismatched LSNs", "incremental from another server", "another engine", "wrong chain root"],
)
def test_forged_chain_is_refused_before_any_download(
    changes: Callable[[Manifest], dict[str, Any]], mention, chain, s3_server, gpg_keys, tmp_path
):
    catalog, link = _forge_inc(s3_server, chain, **changes(chain.inc))
    reads = _Reads(catalog)
    with pytest.raises(CatalogError) as excinfo:
        restore_with(catalog, gpg_keys, tmp_path / "restore" / "data")
    message = str(excinfo.value)
    assert mention in message and link in message, message
    assert reads.backup_objects == []
    _assert_nothing_written(tmp_path)


def test_hostile_names_in_the_data_and_the_manifest_are_only_ever_names(
    seeded, s3_server, bucket, gpg_keys, tmp_path
):
    """Table names reach SQL in the restore test: from the restored data (any user with CREATE can
    pick them) and from the manifest's row counts (anyone who can write to the bucket)."""
    server, _db = seeded
    server.execute_script(
        "CREATE DATABASE `odd``db`; CREATE TABLE `odd``db`.`t``1` (id INT PRIMARY KEY) ENGINE=InnoDB;"
        " CREATE TABLE `odd``db`.`a.b c` (id INT PRIMARY KEY) ENGINE=InnoDB; INSERT INTO `odd``db`.`t``1` VALUES (1);"
    )
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    manifest = run_backup(
        BackupRequest(catalog=catalog, target=target(server), public_keys=[gpg_keys.public_key])
    )
    outfile = tmp_path / "written-by-the-sandbox"
    injected = f"mysql.db` INTO OUTFILE '{outfile}' -- "
    body = json.loads(catalog.store.get_bytes(catalog.manifest_key(manifest.backup_id)))
    body["table_rows"] = {injected: 1}
    catalog.store.put_bytes(catalog.manifest_key(manifest.backup_id), json.dumps(body).encode())

    report = run_restore_test(
        RestoreTestRequest(
            catalog,
            tmp_path / "rt",
            manifest.backup_id,
            private_key=gpg_keys.private_key,
            passphrase=gpg_keys.passphrase,
            level="full",
        )
    )
    assert not outfile.exists(), "a name from the manifest ran as SQL in the restore sandbox"
    assert report.verdict == "fail"
    # CHECK TABLE went through the odd names, and the injected one was looked up as a name.
    assert report.checks["tables_checked"] == report.checks["tables"] > 2
    assert len(report.reasons) == 1 and "db` INTO OUTFILE" in report.reasons[0], report.reasons
    assert report.failed_checks == ["row_counts"], report.reasons
    assert "counted table(s) missing from the restored copy" in report.reasons[0], report.reasons


# -- config errors ----------------------------------------------------------------------------------------


def _config(tmp_path: Path, server: SandboxServer, public_key: Path) -> dict[str, Any]:
    return {
        "storage": {"local_path": str(tmp_path / "store")},
        "encryption": {"public_key_files": [str(public_key)]},
        "clusters": [{"name": "c1", "hosts": [{"name": "db1", "socket": str(server.socket)}]}],
    }


def _set(config: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node: Any = config
    *parents, leaf = path.split(".")
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    node[leaf] = value
    return config


CONFIG_ERRORS = [
    ("unknown flavour", lambda c, t: _set(c, "clusters.0.hosts.0.flavour", "percona"), "clusters.0.hosts.0.flavour"),
    ("bucket and local_path", lambda c, t: _set(c, "storage.bucket", "b"), "exactly one of `bucket`"),
    ("unknown storage class", lambda c, t: _set(c, "storage.storage_class", {"full": "GLACIERX"}), "unknown S3 storage class 'GLACIERX'"),
    ("compression level", lambda c, t: _set(c, "policy", {"compression_level": 99}), "policy.compression_level"),
    ("typo in a key", lambda c, t: _set(c, "polcy", {}), "polcy"),
    ("password variable unset", lambda c, t: _set(c, "clusters.0.hosts.0.password_env", "XBP_NOT_SET"), "environment variable XBP_NOT_SET is not set"),
    ("missing public key file", lambda c, t: _set(c, "encryption.public_key_files", [str(t / "nope.asc")]), "encryption.public_key_files: cannot read"),
    ("bad host name", lambda c, t: _set(c, "clusters.0.hosts.0.name", "../db1"), "clusters.0.hosts.0.name"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "mutate", "mention"), CONFIG_ERRORS, ids=[c[0] for c in CONFIG_ERRORS])
def test_config_error_is_named_with_file_and_field_and_nothing_is_written(
    case, mutate, mention, seeded, gpg_keys, tmp_path, capsys
):
    server, _db = seeded
    public_key = tmp_path / "public.asc"
    public_key.write_text(gpg_keys.public_key)
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(mutate(_config(tmp_path, server, public_key), tmp_path)))
    host = "../db1" if case == "bad host name" else "db1"
    with ProcScanner({}) as scan:
        rc = cli.main(["backup", "--config", str(path), "--cluster", "c1", "--host", host])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("error: ") and mention in err, err
    assert str(path) in err or case == "missing public key file", err
    assert not (tmp_path / "store").exists(), "something was written although the config is wrong"
    assert not scan.processes(lambda argv: "--backup" in argv), "a backup tool was started"


def test_yaml_syntax_error_is_named(tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text("storage:\n  bucket: [unclosed\nclusters: {}\n")
    assert cli.main(["list", "--config", str(path), "--cluster", "c1", "--host", "db1"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "not valid YAML" in err, err


# -- unusable GPG keys ------------------------------------------------------------------------------------


def _expired_public_key() -> tuple[str, str]:
    """A key pair made with the clock in 2020 that expired a day later; (armored public key, fingerprint)."""
    with gpg_home() as home:
        run_gpg(
            home,
            "--faked-system-time",
            "20200101T000000",
            "--quick-gen-key",
            "Expired <expired@example.invalid>",
            "future-default",
            "default",
            "1d",
            passphrase="",
        )
        listing = run_gpg(home, "--with-colons", "--list-keys").stdout.decode()
        fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        return run_gpg(home, "--armor", "--export", fpr).stdout.decode(), fpr


@pytest.mark.parametrize("case", ["expired", "not a key", "expired among good ones"])
def test_unusable_public_key_fails_before_the_backup_starts(case, seeded, s3_server, bucket, gpg_keys):
    server, _db = seeded
    expired, fpr = _expired_public_key()
    keys, mention = {
        "expired": ([expired], fpr),
        "not a key": (
            ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI..."],
            "public key #1: not an ASCII-armored OpenPGP key",
        ),
        "expired among good ones": ([gpg_keys.public_key, expired], fpr),
    }[case]
    catalog = s3_catalog(s3_server.endpoint_url, bucket)
    with ProcScanner({}) as scan, pytest.raises(GpgError) as excinfo:
        run_backup(BackupRequest(catalog=catalog, target=target(server), public_keys=keys))
    message = str(excinfo.value)
    assert mention in message, message
    if case != "not a key":
        assert "unusable" in message and ("expired" in message or "Unusable public key" in message), message
    assert not scan.processes(lambda argv: "--backup" in argv), (
        "the backup tool ran although no key is usable"
    )
    assert snapshot(s3_server.client(), bucket) == {}, "something was stored"
    assert catalog.store.open_multipart_uploads("") == []


def test_restore_with_another_servers_key_names_the_recipients(
    chain, s3_server, other_gpg_keys, gpg_keys, tmp_path
):
    catalog = s3_catalog(s3_server.endpoint_url, chain.bucket)
    reads = _Reads(catalog)
    with pytest.raises(GpgError) as excinfo:
        restore_with(catalog, other_gpg_keys, tmp_path / "restore" / "data")
    assert gpg_keys.fingerprint in str(excinfo.value) and other_gpg_keys.fingerprint in str(excinfo.value)
    assert reads.backup_objects == []
    assert not (tmp_path / "restore" / "data").exists()
