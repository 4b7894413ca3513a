"""Copies in more than one place, through the CLI as a DBA runs it: a first target on one moto S3
endpoint, a second on another moto endpoint (its own S3Server) and a local directory; real MariaDB,
mariabackup, gpg. Every backup and binlog reaches every target with its own manifest; list, verify
and report show every target; a damaged or missing object on the first target restores from the
second and says so; a second target that is down never fails the backup on the first and is caught
up later; each target keeps its own retention.

Both moto servers run in this process and share moto's in-memory backend, so each target has its
own bucket; the test with the second endpoint stopped is what shows the copies really go through
that endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from helpers import S3Server, add_orders, restored_checksums, seed_database, unique_name
from xtrabackup_provider.core.binlog.catalog import BinlogCatalog, server_uuids
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.storage.local import LocalStore
from xtrabackup_provider.core.storage.s3 import S3Store

RUN = "import sys; from xtrabackup_provider.cli.main import main; sys.exit(main(sys.argv[1:]))"
ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def second_endpoint() -> Iterator[S3Server]:
    server = S3Server()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Fleet:
    config: Path
    common: list[str]
    server: SandboxServer
    db: str
    first: Catalog
    offsite: Catalog
    vault: Catalog
    second: S3Server
    tmp: Path
    passphrase: str

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-c", RUN, *args],
            capture_output=True,
            text=True,
            env={
                **ENV,
                "XTRABACKUP_GPG_PASSPHRASE": self.passphrase,
                # the server's own tools first, as the suite has them (make test-mariadb-11.8)
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(self.tmp),
            },
            timeout=600,
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    def host(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.cli(args[0], *self.common, *args[1:])


@pytest.fixture
def fleet(mariadb, s3_server, second_endpoint, gpg_keys, tmp_path) -> Fleet:
    first_bucket = s3_server.make_bucket(f"xbp-first-{uuid.uuid4().hex[:12]}")
    offsite_bucket = second_endpoint.make_bucket(f"xbp-offsite-{uuid.uuid4().hex[:12]}")
    (tmp_path / "public.asc").write_text(gpg_keys.public_key)
    (tmp_path / "private.asc").write_text(gpg_keys.private_key)
    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {
                    "bucket": first_bucket,
                    "endpoint_url": s3_server.endpoint_url,
                    "prefix": "backups",
                },
                "copies": [
                    {
                        "name": "offsite",
                        "bucket": offsite_bucket,
                        "endpoint_url": second_endpoint.endpoint_url,
                        "prefix": "far",
                        "storage_class": {"full": "STANDARD_IA", "incremental": "STANDARD"},
                        "retention": {"keep_last_chains": 1, "min_age_days": 0},  # fewer copies off-site
                        "copy_attempts": 2,
                        "copy_retry_seconds": 0.5,
                    },
                    {"name": "vault", "local_path": str(tmp_path / "vault")},
                ],
                "encryption": {
                    "public_key_files": [str(tmp_path / "public.asc")],
                    "private_key_file": str(tmp_path / "private.asc"),
                },
                "policy": {"max_incremental_ratio": 10.0},
                "clusters": [
                    {
                        "name": "c1",
                        "hosts": [
                            {
                                "name": "db1",
                                "defaults_file": str(mariadb.write_client_defaults(tmp_path / "client.cnf")),
                            }
                        ],
                    }
                ],
            }
        )
    )
    db = unique_name("copies")
    seed_database(mariadb, db, rows=1000)
    return Fleet(
        config,
        ["--config", str(config), "--cluster", "c1", "--host", "db1"],
        mariadb,
        db,
        Catalog(S3Store(s3_server.client(), first_bucket), "backups", "c1", "db1"),
        Catalog(S3Store(second_endpoint.client(), offsite_bucket), "far", "c1", "db1"),
        Catalog(LocalStore(tmp_path / "vault"), "backups", "c1", "db1"),
        second_endpoint,
        tmp_path,
        gpg_keys.passphrase,
    )


def backup(fleet: Fleet, *extra: str) -> str:
    proc = fleet.host("backup", *extra)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("\t")[0]


def test_every_backup_and_binlog_is_on_every_target_and_list_verify_report_show_them(fleet):
    full = backup(fleet)
    add_orders(fleet.server, fleet.db, 300)
    inc = backup(fleet)
    for catalog in (fleet.first, fleet.offsite, fleet.vault):
        assert catalog.backup_ids() == [full, inc], catalog.describe()
    copy = fleet.offsite.get(inc)
    assert copy.copy_of is not None and copy.copy_of.target == "primary"
    assert fleet.offsite.get(full).backup_object.storage_class == "STANDARD_IA"  # the target's own class
    assert copy.backup_object.sha256 == fleet.first.get(inc).backup_object.sha256

    listing = fleet.host("list")
    assert listing.returncode == 0, listing.stderr
    assert [line.split()[-1] for line in listing.stdout.splitlines()[1:]] == ["primary,offsite,vault"] * 2
    verified = fleet.host("verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert sorted(line.split()[0] for line in verified.stdout.splitlines()) == sorted(
        ["primary", "offsite", "vault"] * 2
    )

    shipped = fleet.cli("binlogs", "ship", *fleet.common, "--flush")
    assert shipped.returncode == 0, shipped.stderr
    wanted = {
        m.name for u in server_uuids(fleet.first) for m in BinlogCatalog(fleet.first, u).index().shipped()
    }
    for catalog in (fleet.offsite, fleet.vault):
        got = {m.name for u in server_uuids(catalog) for m in BinlogCatalog(catalog, u).index().shipped()}
        assert got == wanted and got, catalog.describe()

    page = fleet.tmp / "report.html"
    reported = fleet.cli("report", "--config", str(fleet.config), "--cluster", "c1", "--out", str(page))
    assert reported.returncode == 0, reported.stderr
    html = page.read_text()
    assert 'data-copy="offsite"><span class="pass">offsite: up to date' in html
    assert 'data-copy="vault"><span class="pass">vault: up to date' in html
    assert "Time production was blocked per backup (backup locks)" in html  # the locks, charted

    expected = table_checksums(fleet.server, [fleet.db])
    target = fleet.tmp / "from-vault" / "data"
    target.parent.mkdir()
    restored = fleet.host("restore", "--target-datadir", str(target), "--target-store", "vault")
    assert restored.returncode == 0, restored.stderr
    assert f"from target vault into {target}" in restored.stdout
    assert restored_checksums(target, fleet.tmp / "sb1", [fleet.db], server_id=931) == expected


def test_a_damaged_object_on_the_first_target_restores_from_the_second_and_says_so(fleet):
    full = backup(fleet)
    add_orders(fleet.server, fleet.db, 300)
    inc = backup(fleet)
    expected = table_checksums(fleet.server, [fleet.db])
    store = fleet.first.store
    assert isinstance(store, S3Store)
    damaged = fleet.first.get(inc).backup_object.key
    data = bytearray(store.get_bytes(damaged))
    data[len(data) // 2] ^= 0x01  # one flipped bit, same size: only the stream can tell
    store.client.put_object(Bucket=store.bucket, Key=damaged, Body=bytes(data))
    missing = fleet.first.get(full).backup_object.key
    store.delete([missing])

    target = fleet.tmp / "restored" / "data"
    target.parent.mkdir()
    proc = fleet.host("restore", "--target-datadir", str(target))
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note: ")]
    assert len(notes) == 2, proc.stdout
    by_backup = {n.split()[2].rstrip(":"): n for n in notes}
    assert (
        f"fetched from target offsite because primary: {store.location}/{missing} is missing"
        in by_backup[full]
    )
    assert (
        f"fetched from target offsite because primary: gpg --decrypt of {store.location}/{damaged}"
        in by_backup[inc]
    )
    assert restored_checksums(target, fleet.tmp / "sb2", [fleet.db], server_id=932) == expected
    # Verify names the damage on the first target and nothing on the others.
    verified = fleet.host("verify", "--deep")
    bad = [line for line in verified.stdout.splitlines() if "FAILED" in line]
    assert verified.returncode == 1 and {line.split()[0] for line in bad} == {"primary"}, verified.stdout


def test_a_second_target_that_is_down_never_fails_the_first_copy_and_is_caught_up(fleet):
    fleet.second.stop()
    try:
        proc = fleet.host("backup")
        assert proc.returncode == 0, proc.stderr
        bid = proc.stdout.split("\t")[0]
        assert fleet.first.backup_ids() == [bid] and fleet.vault.backup_ids() == [bid]
        lines = [line for line in proc.stderr.splitlines() if " WARNING " in line]
        assert len(lines) == 1, proc.stderr
        assert "copy target offsite (s3://" in lines[0] and f"not copied: {bid}" in lines[0]
        assert "Cannot reach the S3 endpoint" in lines[0] and fleet.second.endpoint_url in lines[0]
        checked = fleet.cli("check", "--config", str(fleet.config))
        assert checked.returncode == 1, checked.stdout + checked.stderr
        assert (
            checked.stdout.startswith("WARNING c1/db1: ")
            and "copy target offsite cannot be read" in checked.stdout
        )
    finally:
        fleet.second.start()
    caught_up = fleet.host("copy")
    assert caught_up.returncode == 0, caught_up.stderr
    assert "copy target offsite" in caught_up.stdout and "copied 1 backup(s)" in caught_up.stdout
    assert fleet.offsite.backup_ids() == [bid]
    checked = fleet.cli("check", "--config", str(fleet.config))
    assert (
        "copies on offsite: none behind" in checked.stdout
        and "copies on vault: none behind" in checked.stdout
    )


def test_each_target_keeps_its_own_retention_and_is_not_refilled(fleet):
    first = backup(fleet, "--kind", "full")
    second = backup(fleet, "--kind", "full")
    plan = fleet.cli("retention", "apply", *fleet.common, "--target-store", "offsite", "--confirm")
    assert plan.returncode == 0, plan.stderr
    assert fleet.offsite.backup_ids() == [second]  # keep_last_chains 1 off-site
    assert fleet.first.backup_ids() == [first, second] == fleet.vault.backup_ids()  # no retention there
    again = fleet.host("copy", "--json")
    assert again.returncode == 0, again.stderr
    assert [r["copied_count"] for r in json.loads(again.stdout)] == [0, 0]
    assert fleet.offsite.backup_ids() == [second]


@pytest.mark.parametrize("damage", ["altered", "deleted"])
def test_a_part_damaged_on_every_target_is_the_object_the_refusal_names(fleet, damage):
    # A K-part backup whose tail (not its first part) is altered or deleted on all three targets:
    # the refusal's headline must name the tail (it named the first part, which every target holds
    # intact: a DBA would go and check the wrong object; the chaos hour run of seed 120511 found
    # the deleted case after the altered one was fixed).
    config = yaml.safe_load(fleet.config.read_text())
    config["policy"].update(max_parts=2, part_min_gib=0)  # the test's datadir is small
    fleet.config.write_text(yaml.safe_dump(config))
    full = backup(fleet)
    names = [o.key.rsplit("/", 1)[-1] for o in fleet.first.get(full).objects]
    assert names[-1] == "backup.tail.xbstream.zst.gpg" and len(names) == 3, names
    for catalog in (fleet.first, fleet.offsite, fleet.vault):
        key = catalog.get(full).objects[-1].key
        if damage == "deleted":
            catalog.store.delete([key])
            continue
        data = bytearray(catalog.store.get_bytes(key))
        data[len(data) // 2] ^= 0x01
        if isinstance(catalog.store, S3Store):
            catalog.store.client.put_object(Bucket=catalog.store.bucket, Key=key, Body=bytes(data))
        else:
            (fleet.tmp / "vault" / key).write_bytes(bytes(data))

    target = fleet.tmp / "restored" / "data"
    target.parent.mkdir()
    proc = fleet.host("restore", "--target-datadir", str(target))
    assert proc.returncode != 0, proc.stdout
    error = next(line for line in proc.stderr.splitlines() if "no storage target holds" in line)
    assert f"backup {full}: no storage target holds backup.tail.xbstream.zst.gpg intact: " in error, error
    assert "p0of2" not in error.split(" intact: ")[0], error
    assert not target.exists() or not any(target.iterdir())
