"""The chaos checker's --to-position and --to-time points agree with the product (no fleet): the
ledger's own load on a real MariaDB, a full backup, the binlogs shipped encrypted to moto; then the
position the checker reads from the shipped binlog (fetch_binlog | mariadb-binlog) and the second
it picks from the ledger restore exactly the ledger rows it expects (sampling.py), both ways the
product replays. A checker that derived either wrongly would call a correct restore wrong."""

from __future__ import annotations

import random
import secrets
import subprocess
import time
from pathlib import Path

import pytest
from ledger import Ledger, LoadWriter, Policy
from restorer import decrypting_home, fetch_binlog
from sampling import compare_rows, expected_rows, rows_until, time_points, transaction_ends
from storeview import StoreReader

from helpers import iso_utc, root_target
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.db.sandbox import SandboxServer
from xtrabackup_provider.core.pitr.plan import PitrTarget
from xtrabackup_provider.core.pitr.recover import PitrRequest, point_in_time_restore
from xtrabackup_provider.core.storage.s3 import S3Store, make_s3_client


@pytest.fixture(scope="module")
def shipped(mariadb_factory, s3_server, gpg_keys, tmp_path_factory):
    server = mariadb_factory("sample", root_password=secrets.token_urlsafe(16))
    bucket = s3_server.make_bucket(f"xbp-sample-{secrets.token_hex(6)}")
    client = make_s3_client(s3_server.endpoint_url, "us-east-1")
    catalog = Catalog(S3Store(client, bucket), "backups", "c1", "db1")
    server.query("CREATE DATABASE chaos")
    ledger = Ledger(tmp_path_factory.mktemp("ledger") / "ledger.jsonl", {"primary": Policy(2)})
    writer = LoadWriter(ledger, {"c1": server}, every=0.15)
    writer.start()
    try:
        time.sleep(2)
        run_backup(BackupRequest(catalog=catalog, target=root_target(server), public_keys=[gpg_keys.public_key],
                                 kind="full"))  # fmt: skip
        time.sleep(4)
        server.query("FLUSH BINARY LOGS")  # the points cross binlog files
        time.sleep(4)
    finally:
        writer.close()
    ship_binlogs(ShipRequest(catalog=catalog, target=root_target(server), public_keys=[gpg_keys.public_key],
                             flush=True))  # fmt: skip
    return catalog, StoreReader(client, bucket), ledger


def _restore(
    catalog: Catalog, gpg_keys, work: Path, target: PitrTarget, replay: str
) -> tuple[dict[int, str], str]:
    datadir = work / "data"
    report = point_in_time_restore(PitrRequest(catalog=catalog, target_datadir=datadir, target=target,
                                               private_key=gpg_keys.private_key, passphrase=gpg_keys.passphrase,
                                               replay=replay))  # fmt: skip
    with SandboxServer.on_datadir(datadir, work / "sb", server_id=990) as restored:
        restored.start()
        rows = {int(n): str(v) for n, v in restored.query(f"SELECT n, v FROM {LoadWriter.TABLE}")}
    return rows, report.reached_gtid


@pytest.mark.parametrize("replay", ["applier", "pipe"])
def test_a_position_read_from_the_shipped_binlog_restores_exactly_the_rows_up_to_its_transaction(
    shipped, gpg_keys, tmp_path, replay
):
    catalog, reader, ledger = shipped
    view = reader.host("backups/c1/db1")
    full = next(iter(view.manifests.values()))
    known = ledger.rows_of("c1")
    after = [r for r in known if r.seq > int(full["gtid"].split("-")[2]) + 2]
    assert len(after) > 20, "the ledger's load wrote after the full"
    row = random.Random(replay).choice(after[:-2])
    binlog = next(
        m for m in view.binlogs.values() if _seq(m["gtid_first"]) <= row.seq <= _seq(m["gtid_last"])
    )
    with decrypting_home(gpg_keys.private_key, gpg_keys.passphrase) as gpg:
        raw = fetch_binlog(reader, binlog, gpg, tmp_path / binlog["name"])
    assert raw.stat().st_size == binlog["size"]

    listing = subprocess.run(["mariadb-binlog", str(raw)], capture_output=True, text=True, check=True).stdout
    position = f"{binlog['name']}:{transaction_ends(listing)[row.seq]}"
    rows, reached = _restore(catalog, gpg_keys, tmp_path, PitrTarget.at_position(position), replay)
    assert _seq(reached) == row.seq, f"{position}: the end of seq {row.seq}"
    assert compare_rows(rows, *rows_until(known, row.seq)) == []


@pytest.mark.parametrize("replay", ["applier", "pipe"])
def test_a_second_the_ledger_picks_restores_every_row_acknowledged_before_it_and_none_started_after(
    shipped, gpg_keys, tmp_path, replay
):
    catalog, _reader, ledger = shipped
    known = ledger.rows_of("c1")
    points = time_points(random.Random(replay), known, known[0].seq, known[-1].seq, [], 3)
    assert points, "no clean second in the ledger's load"
    point = points[-1]
    rows, reached = _restore(catalog, gpg_keys, tmp_path, PitrTarget.at_time(iso_utc(point.at)), replay)
    must, must_not = expected_rows(known, point.at)
    assert compare_rows(rows, must, must_not) == []
    assert must[-1].seq <= _seq(reached) < must_not[0].seq


def _seq(gtid: str) -> int:
    return int(gtid.split(",")[0].split("-")[2])
