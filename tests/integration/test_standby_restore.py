"""`restore --from-standby`: the prepared standby as a restore source, with a chain restore's checks.

A real server, a full + incrementals in a directory store, a standby kept by update_standby. The
restore proves what the standby holds against the catalog and the tool's own metadata, applies
newer incrementals of its chain first, names a standby older than the newest backup, and refuses
a directory that is not a standby, leaving the target empty.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import add_orders, restored_checksums, seed_database, take_backup, unique_name
from xtrabackup_provider.cli import main as cli_main
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.restore.chain import RestoreError
from xtrabackup_provider.core.restore.standby import load_state, restore_standby, update_standby
from xtrabackup_provider.core.storage.local import LocalStore


@dataclass
class Setup:
    server: SandboxServer
    catalog: Catalog
    store: Path
    db: str
    keys: dict[str, str]


@pytest.fixture
def setup(mariadb, gpg_keys, tmp_path) -> Setup:
    db = unique_name("sby")
    seed_database(mariadb, db, rows=800)
    store = tmp_path / "store"
    return Setup(
        mariadb,
        Catalog(LocalStore(str(store)), "backups", "c1", "db1"),
        store,
        db,
        {"private_key": gpg_keys.private_key, "passphrase": gpg_keys.passphrase},
    )


def _change(s: Setup, n: int) -> None:
    add_orders(s.server, s.db, 200)
    s.server.query(f"UPDATE `{s.db}`.customers SET name = CONCAT(name, '{n}') WHERE id % 5 = {n % 5}")


def _cli(s: Setup, gpg_keys, tmp_path: Path, monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    key = tmp_path / "private.asc"
    key.write_text(gpg_keys.private_key)
    monkeypatch.setenv("XTRABACKUP_GPG_PASSPHRASE", gpg_keys.passphrase)
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    rc = cli_main(["restore", "--cluster", "c1", "--host", "db1", "--local-path", str(s.store), *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_restores_the_standby_after_applying_the_newer_incremental(
    setup, gpg_keys, tmp_path, monkeypatch, capsys
):
    full = take_backup(setup.server, setup.catalog, gpg_keys, "full")
    _change(setup, 1)
    inc1 = take_backup(setup.server, setup.catalog, gpg_keys, "incremental")
    standby = tmp_path / "standby"
    update_standby(setup.catalog, standby, **setup.keys)
    _change(setup, 2)
    inc2 = take_backup(setup.server, setup.catalog, gpg_keys, "incremental")  # the standby has not seen it
    expected = table_checksums(setup.server, [setup.db])
    datadir = tmp_path / "restored" / "data"
    key = tmp_path / "private.asc"
    key.write_text(gpg_keys.private_key)
    rc, out, err = _cli(
        setup,
        gpg_keys,
        tmp_path,
        monkeypatch,
        capsys,
        *("--from-standby", str(standby), "--target-datadir", str(datadir), "--private-key-file", str(key)),
        "--create-parents",
        "--json",
    )
    assert rc == 0, err
    report = json.loads(out)
    assert report["backup_id"] == inc2.backup_id and report["chain"] == [
        full.backup_id,
        inc1.backup_id,
        inc2.backup_id,
    ]
    assert report["applied_first"] == [inc2.backup_id] and report["older"] is None
    assert report["gtid"] == inc2.gtid
    assert restored_checksums(datadir, tmp_path / "sb", [setup.db], server_id=960) == expected
    state = load_state(standby)
    assert state is not None and state.applied[-1] == inc2.backup_id, "the standby stays current"


def test_a_standby_older_than_the_newest_backup_is_named_and_restored_only_when_accepted(
    setup, gpg_keys, tmp_path
):
    take_backup(setup.server, setup.catalog, gpg_keys, "full")
    _change(setup, 1)
    inc = take_backup(setup.server, setup.catalog, gpg_keys, "incremental")
    standby = tmp_path / "standby"
    update_standby(setup.catalog, standby, **setup.keys)
    held = table_checksums(setup.server, [setup.db])
    _change(setup, 2)
    newer_full = take_backup(setup.server, setup.catalog, gpg_keys, "full")
    datadir = tmp_path / "restored" / "data"
    with pytest.raises(RestoreError) as refused:
        restore_standby(setup.catalog, standby, datadir, **setup.keys)
    message = str(refused.value)
    assert (
        f"holds {inc.backup_id}" in message and newer_full.backup_id in message and "newer chain" in message
    )
    assert not datadir.exists() or not any(datadir.iterdir())

    report = restore_standby(setup.catalog, standby, datadir, **setup.keys, allow_older=True)
    assert (
        report.backup_id == inc.backup_id
        and report.older
        and report.newest_in_catalog == newer_full.backup_id
    )
    assert restored_checksums(datadir, tmp_path / "sb", [setup.db], server_id=961) == held


def test_newer_incrementals_without_the_private_key_are_named(setup, gpg_keys, tmp_path):
    take_backup(setup.server, setup.catalog, gpg_keys, "full")
    standby = tmp_path / "standby"
    update_standby(setup.catalog, standby, **setup.keys)
    _change(setup, 1)
    inc = take_backup(setup.server, setup.catalog, gpg_keys, "incremental")
    with pytest.raises(
        RestoreError, match=f"{inc.backup_id} of its chain are not applied \\(no private key given\\)"
    ):
        restore_standby(setup.catalog, standby, tmp_path / "restored" / "data")


def test_a_state_the_base_does_not_back_up_is_refused(setup, gpg_keys, tmp_path):
    take_backup(setup.server, setup.catalog, gpg_keys, "full")
    standby = tmp_path / "standby"
    update_standby(setup.catalog, standby, **setup.keys)
    _change(setup, 1)
    inc = take_backup(setup.server, setup.catalog, gpg_keys, "incremental")
    # The state claims the incremental was merged; the tool's metadata in base/ says otherwise.
    raw = json.loads((standby / "standby.json").read_text())
    raw["applied"].append(inc.backup_id)
    (standby / "standby.json").write_text(json.dumps(raw))
    datadir = tmp_path / "restored" / "data"
    with pytest.raises(RestoreError, match="does not hold what its state says"):
        restore_standby(setup.catalog, standby, datadir)
    assert not datadir.exists() or not any(datadir.iterdir())

    raw["applied"].pop()
    raw["step"] = f"apply {inc.backup_id}"  # killed in the middle of a merge
    (standby / "standby.json").write_text(json.dumps(raw))
    with pytest.raises(RestoreError, match="interrupted during 'apply"):
        restore_standby(setup.catalog, standby, datadir)


def test_a_directory_that_is_not_a_standby_is_one_line_and_the_target_stays_empty(
    setup, gpg_keys, tmp_path, monkeypatch, capsys
):
    take_backup(setup.server, setup.catalog, gpg_keys, "full")
    somewhere = tmp_path / "not-a-standby"
    somewhere.mkdir()
    (somewhere / "ibdata1").write_bytes(b"x")
    datadir = tmp_path / "restored" / "data"
    rc, out, err = _cli(
        setup,
        gpg_keys,
        tmp_path,
        monkeypatch,
        capsys,
        "--from-standby",
        str(somewhere),
        "--target-datadir",
        str(datadir),
        "--create-parents",
    )
    assert rc == 2 and out == ""
    assert err.strip() == (
        f"error: {somewhere} is not a standby (standby.json missing): name the standby_dir the standby task keeps, "
        "or restore the chain"
    )
    assert not datadir.exists() and (somewhere / "ibdata1").read_bytes() == b"x"


def test_moving_the_standby_out_is_fast_and_its_next_update_rebuilds_it(setup, gpg_keys, tmp_path):
    full = take_backup(setup.server, setup.catalog, gpg_keys, "full")
    standby = tmp_path / "standby"
    update_standby(setup.catalog, standby, **setup.keys)
    expected = table_checksums(setup.server, [setup.db])
    datadir = tmp_path / "restored" / "data"
    report = restore_standby(setup.catalog, standby, datadir, move=True)
    assert report.moved and report.backup_id == full.backup_id
    assert restored_checksums(datadir, tmp_path / "sb", [setup.db], server_id=962) == expected
    with pytest.raises(RestoreError, match="was moved into"):
        restore_standby(setup.catalog, standby, tmp_path / "again" / "data")
    assert update_standby(setup.catalog, standby, **setup.keys).rebuilt
