"""Point-in-time recovery from the standby: the prepared standby as the base, the shipped binlogs
rolled forward to a time, a GTID or a position, the chain never fetched. The result equals the
chain's PITR to the same point (rows, CHECKSUM TABLE, gtid_slave_pos); a standby behind the target
catches up no further than the target; one past the target is refused by name.

Real components: a MariaDB sandbox with its binlog, mariabackup, gpg, mariadb-binlog, binlogs
shipped encrypted to a directory store; the CLI's `standby refresh` and `restore --from-standby`.
"""

from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import commit_known, iso_utc, root_target, unique_name
from xtrabackup_provider.cli import main as cli_main
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.catalog.manifest import Manifest
from xtrabackup_provider.core.db.sandbox import SandboxServer, table_checksums
from xtrabackup_provider.core.pitr.from_standby import standby_point_in_time_restore
from xtrabackup_provider.core.pitr.plan import PitrError, PitrTarget
from xtrabackup_provider.core.pitr.recover import PitrRequest, point_in_time_restore
from xtrabackup_provider.core.restore.standby import load_state, update_standby
from xtrabackup_provider.core.storage.local import LocalStore


@dataclass
class Shipped:
    server: SandboxServer
    store: Path
    db: str
    full: Manifest | None = None
    incremental: Manifest | None = None
    rows: dict[str, frozenset[int]] = field(default_factory=dict)
    times: dict[str, int] = field(default_factory=dict)
    gtids: dict[str, str] = field(default_factory=dict)
    positions: dict[str, str] = field(default_factory=dict)

    def catalog(self, root: Path | None = None) -> Catalog:
        return Catalog(LocalStore(root or self.store), "backups", "c1", "db1")

    def known(self, label: str) -> None:
        point = commit_known(self.server, self.db, label)
        self.rows[label], self.times[label] = point.rows, point.time
        self.gtids[label], self.positions[label] = point.gtid, point.position


@pytest.fixture(scope="module")
def shipped(mariadb_factory, gpg_keys, tmp_path_factory) -> Shipped:
    server = mariadb_factory("sbpitr", root_password=secrets.token_urlsafe(16))
    h = Shipped(server, tmp_path_factory.mktemp("store"), unique_name("sbp"))
    server.query(f"CREATE DATABASE `{h.db}`")
    server.query(f"CREATE TABLE `{h.db}`.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64)) ENGINE=InnoDB")
    server.query(f"INSERT INTO `{h.db}`.t (v) SELECT 'before' FROM seq_1_to_300", database=h.db)
    backup = dict(catalog=h.catalog(), target=root_target(server), public_keys=[gpg_keys.public_key])
    h.full = run_backup(BackupRequest(kind="full", **backup))
    h.known("A0")
    h.known("A")
    h.incremental = run_backup(BackupRequest(kind="incremental", **backup))
    h.known("B")
    server.query("FLUSH BINARY LOGS")  # the roll-forward crosses binlog files
    h.known("C")
    h.known("D")
    ship_binlogs(
        ShipRequest(
            catalog=h.catalog(), target=root_target(server), public_keys=[gpg_keys.public_key], flush=True
        )
    )
    return h


def _request(catalog: Catalog, datadir: Path, target: PitrTarget, gpg_keys) -> PitrRequest:
    return PitrRequest(
        catalog=catalog,
        target_datadir=datadir,
        target=target,
        private_key=gpg_keys.private_key,
        passphrase=gpg_keys.passphrase,
    )


def _standby(shipped: Shipped, gpg_keys, directory: Path) -> Path:
    update_standby(
        shipped.catalog(), directory, private_key=gpg_keys.private_key, passphrase=gpg_keys.passphrase
    )
    return directory


def _without_backup_objects(shipped: Shipped, root: Path) -> Catalog:
    """A copy of the store with the backups' manifests and binlogs, but none of the backups' data:
    what a restore that never fetches the chain still works on."""
    shutil.copytree(shipped.store, root)
    gone = [p for p in (root / "backups/c1/db1/backups").rglob("backup*.xbstream*")]
    assert gone
    for path in gone:
        path.unlink()
    return shipped.catalog(root)


def _state(datadir: Path, basedir: Path, db: str) -> tuple[frozenset[int], dict[str, int], str]:
    with SandboxServer.on_datadir(datadir, basedir, server_id=978) as restored:
        restored.start()
        ids = frozenset(r[0] for r in restored.query(f"SELECT id FROM `{db}`.t"))
        gtid = str(restored.query("SELECT @@gtid_slave_pos")[0][0] or "")
        return ids, table_checksums(restored, [db]), gtid


def test_the_standby_rolled_forward_equals_the_chains_pitr_and_never_fetches_the_chain(
    shipped, gpg_keys, tmp_path
):
    standby = _standby(shipped, gpg_keys, tmp_path / "standby")
    catalog = _without_backup_objects(shipped, tmp_path / "no-backup-data")
    target = PitrTarget.at_gtid(shipped.gtids["C"])
    ours = tmp_path / "from-standby" / "data"
    report = standby_point_in_time_restore(_request(catalog, ours, target, gpg_keys), standby)
    assert report.standby == str(standby) and report.backup_id == shipped.incremental.backup_id
    assert report.reached_gtid == shipped.gtids["C"] and report.transactions >= 2
    chain = tmp_path / "from-chain" / "data"
    point_in_time_restore(_request(shipped.catalog(), chain, target, gpg_keys))
    got, want = _state(ours, tmp_path / "sb1", shipped.db), _state(chain, tmp_path / "sb2", shipped.db)
    assert got[0] == shipped.rows["C"]
    assert got == want, "the standby's roll-forward and the chain's PITR differ"
    state = load_state(standby)
    assert state is not None and state.consumed_by is None, "a copy leaves the standby usable"


def test_a_standby_behind_catches_up_no_further_than_the_target(shipped, gpg_keys, tmp_path):
    standby = tmp_path / "standby"
    update_standby(
        shipped.catalog(), standby, private_key=gpg_keys.private_key, passphrase=gpg_keys.passphrase
    )  # today's standby holds the incremental; make one that holds the full alone:
    shutil.rmtree(standby)
    only_full = tmp_path / "only-full"
    shutil.copytree(shipped.store, only_full)
    shutil.rmtree(only_full / "backups/c1/db1/backups" / shipped.incremental.backup_id)
    update_standby(
        shipped.catalog(only_full), standby, private_key=gpg_keys.private_key, passphrase=gpg_keys.passphrase
    )
    assert load_state(standby).newest == shipped.full.backup_id

    datadir = tmp_path / "restored" / "data"
    target = PitrTarget.at_time(iso_utc(shipped.times["B"]))
    report = standby_point_in_time_restore(_request(shipped.catalog(), datadir, target, gpg_keys), standby)
    assert report.backup_id == shipped.incremental.backup_id, "caught up to the incremental before the target"
    assert _state(datadir, tmp_path / "sb", shipped.db)[0] == shipped.rows["B"]


def test_a_standby_past_the_target_is_refused_by_name_and_the_target_stays_empty(shipped, gpg_keys, tmp_path):
    standby = _standby(shipped, gpg_keys, tmp_path / "standby")
    datadir = tmp_path / "restored" / "data"
    target = PitrTarget.at_gtid(shipped.gtids["A0"])  # before the incremental the standby holds
    with pytest.raises(PitrError) as excinfo:
        standby_point_in_time_restore(_request(shipped.catalog(), datadir, target, gpg_keys), standby)
    message = str(excinfo.value)
    assert (
        str(standby) in message and shipped.incremental.backup_id in message and "--from-standby" in message
    )
    assert not datadir.exists()


def test_cli_refreshes_the_standby_and_restores_from_it_to_a_position(
    shipped, gpg_keys, tmp_path, monkeypatch, capsys
):
    key = tmp_path / "private.asc"
    key.write_text(gpg_keys.private_key)
    monkeypatch.setenv("XTRABACKUP_GPG_PASSPHRASE", gpg_keys.passphrase)
    monkeypatch.delenv("XTRABACKUP_FLEET_CONFIG", raising=False)
    where = ["--cluster", "c1", "--host", "db1", "--local-path", str(shipped.store)]
    standby = tmp_path / "standby"
    rc = cli_main(
        ["standby", "refresh", *where, "--standby-dir", str(standby), "--private-key-file", str(key)]
    )
    out = capsys.readouterr().out
    assert rc == 0 and f"holds {shipped.incremental.backup_id}" in out, out
    datadir = tmp_path / "restored" / "data"
    rc = cli_main(
        [
            "restore",
            *where,
            *("--target-datadir", str(datadir), "--create-parents", "--private-key-file", str(key)),
            *("--from-standby", str(standby), "--to-position", shipped.positions["D"]),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"from standby {standby}" in out and f"GTID {shipped.gtids['D']}" in out, out
    assert _state(datadir, tmp_path / "sb", shipped.db)[0] == shipped.rows["D"]
