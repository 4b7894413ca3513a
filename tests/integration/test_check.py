"""`xtrabackup-provider check` on real backups, a real restore test and really shipped (and really
lost) binlogs: exit 0 when all is well, 1 for a failed restore test, 2 for a backup older than the
RPO or a binlog gap after the newest backup; one line per host."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from helpers import purge_binlogs_to, root_target, seed_database, unique_name
from xtrabackup_provider.core.backup.run import BackupRequest, run_backup
from xtrabackup_provider.core.binlog.catalog import BinlogGapError
from xtrabackup_provider.core.binlog.ship import ShipRequest, ship_binlogs
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.config.load import load_config
from xtrabackup_provider.core.report.check import check_fleet
from xtrabackup_provider.core.restore.restore_test import RestoreTestRequest, run_restore_test
from xtrabackup_provider.core.storage.local import LocalStore

RUN = "import sys; from xtrabackup_provider.cli.main import main; sys.exit(main(sys.argv[1:]))"


def check(config: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-c", RUN, "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture
def host(mariadb, gpg_keys, tmp_path):
    """Cluster c1 with one host db1 backed up to a directory, binlogs shipped."""
    config = tmp_path / "fleet.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(tmp_path / "store")},
                "clusters": [
                    {
                        "name": "c1",
                        "binlogs": {},
                        "check": {"rpo_hours": 26, "binlog_max_lag_minutes": 60},
                        "hosts": [{"name": "db1"}],
                    }
                ],
            }
        )
    )
    catalog = Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")
    seed_database(mariadb, unique_name("check"), rows=500)
    backup = run_backup(BackupRequest(catalog, root_target(mariadb), public_keys=[gpg_keys.public_key]))
    ship = ShipRequest(catalog, root_target(mariadb), [gpg_keys.public_key], flush=True)
    ship_binlogs(ship)
    return config, catalog, backup, ship


def test_all_well_is_ok_and_a_failed_last_restore_test_is_a_warning(host, gpg_keys, tmp_path):
    config, catalog, backup, _ship = host
    keys = {"private_key": gpg_keys.private_key, "passphrase": gpg_keys.passphrase}
    assert run_restore_test(RestoreTestRequest(catalog, tmp_path / "rt1", **keys)).verdict == "pass"
    ok = check(config)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (line,) = ok.stdout.splitlines()
    assert line.startswith(f"OK c1/db1: newest restorable backup {backup.backup_id} is ")
    assert "restore test passed" in line and "binlogs shipped up to" in line

    # The next restore test fails (no private key): a warning, not critical.
    assert run_restore_test(RestoreTestRequest(catalog, tmp_path / "rt2")).verdict == "fail"
    warned = check(config)
    assert warned.returncode == 1, warned.stdout
    (line,) = warned.stdout.splitlines()
    assert line.startswith(
        f"WARNING c1/db1: the last restore test ({backup.backup_id}) failed check(s) restore: "
    )


def test_newest_backup_older_than_the_rpo_is_critical(host):
    config, _catalog, backup, _ship = host
    later = backup.finished_at + timedelta(hours=27)
    (result,) = check_fleet(load_config(config), "c1", now=later)
    assert result.status == "critical"
    assert result.line().startswith(
        f"CRITICAL c1/db1: newest restorable backup {backup.backup_id} is 1 d 3 h old, over the RPO of 1 d 2 h"
    )
    assert result.backup_age_seconds == pytest.approx(27 * 3600)


def test_a_binlog_gap_after_the_newest_backup_is_critical(host, mariadb):
    config, _catalog, backup, ship = host
    for _ in range(3):
        mariadb.query("FLUSH BINARY LOGS")
    newest = mariadb.query("SHOW BINARY LOGS")[-1][0]
    purge_binlogs_to(mariadb, newest)  # lost before they were shipped
    with pytest.raises(BinlogGapError):
        ship_binlogs(ship)
    proc = check(config)
    assert proc.returncode == 2, proc.stdout
    (line,) = proc.stdout.splitlines()
    assert line.startswith("CRITICAL c1/db1: binlog gap mysql-bin.")
    assert f"after backup {backup.backup_id}: point-in-time recovery stops there; take a full backup" in line
