"""Soak: 50 backup cycles (fulls and incrementals by policy) while sysbench writes to the server;
at the end every chain's newest backup restores to exactly the data at its backup point.

"The data at its backup point" is taken from a replica: it is held stopped during the soak, then
replayed to each backup's GTID (START SLAVE UNTIL) and checksummed there, so the comparison is
exact although the source never stopped writing. `make soak` runs it; XBP_SOAK_CYCLES changes
the number of cycles.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from datetime import timedelta
from itertools import groupby

import pytest
from faultkit import open_uploads, s3_catalog, snapshot, target, wait_next_second

from helpers import parse_gtid_pos, slave_status, start_replication, unique_name, wait_caught_up
from xtrabackup_provider.core.backup import BackupRequest, run_backup
from xtrabackup_provider.core.catalog import Manifest
from xtrabackup_provider.core.decision import ChainPolicy
from xtrabackup_provider.core.lock import LOCK_NAME
from xtrabackup_provider.core.restore import RestoreRequest, restore
from xtrabackup_provider.core.sandbox import SandboxServer, table_checksums

CYCLES = int(os.environ.get("XBP_SOAK_CYCLES", "50"))
CHAIN_LENGTH = 4  # incrementals per full
SB_DB = "sbtest"
SB_TABLES = 4


def _sysbench(server: SandboxServer, password: str, command: str, *extra: str) -> list[str]:
    # A throwaway user of the test server: sysbench only takes its password on the command line.
    return [
        "sysbench",
        "oltp_write_only",
        "--db-driver=mysql",
        f"--mysql-socket={server.socket}",
        "--mysql-user=sb",
        f"--mysql-password={password}",
        f"--mysql-db={SB_DB}",
        f"--tables={SB_TABLES}",
        "--table-size=5000",
        *extra,
        command,
    ]


def _replay_to(replica: SandboxServer, gtid: str, timeout: float = 120) -> None:
    """Let the stopped replica apply exactly up to `gtid`, then stop again."""
    replica.query("START SLAVE UNTIL master_gtid_pos = %s", (gtid,))
    wanted = parse_gtid_pos(gtid)
    deadline = time.monotonic() + timeout
    while True:
        status = slave_status(replica)
        if status.get("Last_SQL_Errno"):
            raise AssertionError(f"replica failed: {status.get('Last_SQL_Error')}")
        applied = parse_gtid_pos(replica.query("SELECT @@gtid_slave_pos")[0][0])
        if status.get("Slave_SQL_Running") == "No" and all(applied.get(d, 0) >= s for d, s in wanted.items()):
            assert applied == wanted, f"the replica went past {gtid}: {applied}"
            replica.query("STOP SLAVE")
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"replica did not reach {gtid}: {applied}")
        time.sleep(0.05)


@pytest.mark.slow
def test_soak_backup_cycles_under_write_load_and_every_chain_restores(
    mariadb_factory, s3_server, gpg_keys, tmp_path
):
    source = mariadb_factory("soak-src", root_password=secrets.token_urlsafe(16))
    replica = mariadb_factory("soak-rep", root_password=secrets.token_urlsafe(16))
    load: subprocess.Popen[bytes] | None = None
    try:
        sb_password = secrets.token_hex(12)
        source.execute_script(
            f"CREATE DATABASE {SB_DB}; CREATE USER sb@localhost IDENTIFIED BY '{sb_password}';"
            f" GRANT ALL ON {SB_DB}.* TO sb@localhost;"
        )
        subprocess.run(_sysbench(source, sb_password, "prepare"), check=True, capture_output=True)
        start_replication(source, replica)
        wait_caught_up(source, replica)
        replica.query("STOP SLAVE")  # held back; replayed to each backup's GTID at the end

        load = subprocess.Popen(
            _sysbench(
                source,
                sb_password,
                "run",
                "--threads=2",
                "--rate=30",
                "--time=0",
                "--mysql-ignore-errors=1213,1205,1020",
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        catalog = s3_catalog(
            s3_server.endpoint_url, s3_server.make_bucket(unique_name("xbp-soak").replace("_", "-"))
        )
        policy = ChainPolicy(timedelta(days=7), CHAIN_LENGTH, max_incremental_ratio=100.0)
        manifests: list[Manifest] = []
        for _ in range(CYCLES):
            if manifests:
                wait_next_second(manifests[-1].started_at)
            request = BackupRequest(
                catalog=catalog,
                target=target(source),
                public_keys=[gpg_keys.public_key],
                policy=policy,
                compression_level=1,
            )
            manifests.append(run_backup(request))
            assert load.poll() is None, (
                f"sysbench stopped: {load.stderr.read().decode()[-2000:] if load.stderr else ''}"
            )
        load.terminate()
        load.wait(30)

        # Fulls and incrementals by policy, one chain per full, every link continuous.
        kinds = [m.kind for m in manifests]
        expected_kinds = (["full"] + ["incremental"] * CHAIN_LENGTH) * (CYCLES // (CHAIN_LENGTH + 1) + 1)
        assert kinds == expected_kinds[:CYCLES]
        assert catalog.backup_ids() == [m.backup_id for m in manifests]
        seqs = [max(parse_gtid_pos(m.gtid).values()) for m in manifests]
        assert seqs == sorted(seqs) and seqs[-1] - seqs[0] > CYCLES, "the server was not under write load"
        assert open_uploads(s3_server.client(), catalog.store.bucket) == []
        stored = snapshot(s3_server.client(), catalog.store.bucket)
        registered = {k for m in manifests for k in (m.backup_object.key, catalog.manifest_key(m.backup_id))}
        assert set(stored) == registered, f"debris or a lock left: {set(stored) ^ registered}"
        assert not any(k.endswith(LOCK_NAME) for k in stored)

        chains = [list(g) for _, g in groupby(manifests, key=lambda m: m.chain_root)]
        assert len(chains) == -(-CYCLES // (CHAIN_LENGTH + 1))
        for n, chain in enumerate(chains):
            newest = chain[-1]
            assert [m.backup_id for m in catalog.chain(newest.backup_id)] == [m.backup_id for m in chain]
            _replay_to(replica, newest.gtid or "")
            expected = table_checksums(replica, [SB_DB])
            datadir = tmp_path / f"chain{n}" / "data"
            restore(
                RestoreRequest(
                    catalog=catalog,
                    target_datadir=datadir,
                    backup_id=newest.backup_id,
                    private_key=gpg_keys.private_key,
                    passphrase=gpg_keys.passphrase,
                )
            )
            with SandboxServer.on_datadir(datadir, tmp_path / f"sb{n}", server_id=980 + n) as restored:
                restored.start()
                got = table_checksums(restored, [SB_DB])
            assert len(got) == SB_TABLES and got == expected, (
                f"chain {n} ({newest.backup_id}) restored other data"
            )
            shutil.rmtree(datadir.parent)
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait()
        mariadb_factory.discard(replica)
        mariadb_factory.discard(source)
