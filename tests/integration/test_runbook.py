"""docs/RUNBOOK.md's command sequences, run as written, in the runbook's order, against a real
MariaDB, a directory store and real GPG keys: find the backups, check them, restore the newest
one and a point in time before an accident, find the accident in the shipped binlogs, ship and
take a full backup, prove it with a restore test. The commands are read from the page itself
(only its example paths and times are replaced by this machine's), so an edit of the runbook is
an edit of this test; the few that need another set-up name the test that runs them."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import yaml

from doc_commands import CLI, cli_lines
from helpers import cli, iso_utc, restored_checksums, seed_database
from xtrabackup_provider.core.db.sandbox import table_checksums

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "RUNBOOK.md"
TESTS = Path(__file__).resolve().parents[1]
# Runbook commands this test does not run: each needs a set-up of its own, which that test has.
ELSEWHERE = {
    "glacier-restore": TESTS / "integration" / "test_glacier.py",
    "restore-table": TESTS / "integration" / "test_table_restore.py",
    "--from-standby": TESTS / "integration" / "test_standby_restore.py",
    "promote": TESTS / "integration" / "test_promote.py",
    "provision-replica": TESTS / "integration" / "test_provision_replica.py",
}


def _elsewhere(command: str) -> Path | None:
    words = command.split()
    return next((test for key, test in ELSEWHERE.items() if key in words[1:3] or key in words), None)


def _as_here(command: str, here: Path, times: dict[str, str]) -> list[str]:
    """The runbook's line with this machine's paths and times: /srv/... under `here`, the
    example times by the real ones of this run; its comment dropped."""
    command = command.split(" #", 1)[0]
    command = command.replace(" /srv/", f" {here}/srv/")
    for option, value in times.items():
        command = re.sub(rf"{option} \S+", f"{option} {value}", command)
    return command.split()[1:]


def test_the_runbook_as_written(mariadb, gpg_keys, tmp_path):
    commands = cli_lines(RUNBOOK.read_text())
    assert len(commands) >= 12, commands
    (tmp_path / "public.asc").write_text(gpg_keys.public_key)
    private = tmp_path / "private.asc"
    private.write_text(gpg_keys.private_key)
    private.chmod(0o600)
    (tmp_path / "fleet.yaml").write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(tmp_path / "store")},
                # The runbook's copy (`--target-store offsite`, `copy --from offsite`).
                "copies": [{"name": "offsite", "local_path": str(tmp_path / "offsite")}],
                "encryption": {
                    "public_key_files": [str(tmp_path / "public.asc")],
                    "private_key_file": str(private),
                },
                "clusters": [
                    {
                        "name": "main",  # the runbook's --cluster main --host db1
                        "hosts": [
                            {
                                "name": "db1",
                                "defaults_file": str(mariadb.write_client_defaults(tmp_path / "db1.cnf")),
                                "standby_dir": str(tmp_path / "standby" / "db1"),  # `standby refresh`
                                "standby_queue": "recovery",  # the worker it lives on (the DAG's)
                            }
                        ],
                    }
                ],
            }
        )
    )
    env = {"XTRABACKUP_GPG_PASSPHRASE": gpg_keys.passphrase}

    def run(*argv: str):
        done = cli(*argv, env=env, cwd=tmp_path)  # `--config fleet.yaml` as the runbook writes it
        if argv[0] == "check" and done.returncode == 1:  # warnings (a fresh host: no restore test yet)
            assert "CRITICAL" not in done.stdout, done.stdout
            return done
        assert done.returncode == 0, (
            f"{CLI} {' '.join(argv)}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
        return done

    # Before the incident: the host's backups and binlogs, as the DAGs would have stored them.
    seed_database(mariadb, "shop", rows=500)
    common = ("--config", "fleet.yaml", "--cluster", "main", "--host", "db1")
    run("backup", *common, "--kind", "full")
    mariadb.query("INSERT INTO shop.orders SELECT id + 100000, customer_id, amount, note FROM shop.orders")
    good = table_checksums(mariadb, ["shop"])
    before = int(mariadb.query("SELECT UNIX_TIMESTAMP()")[0][0]) + 1
    while time.time() < before + 1.05:  # binlogs stamp whole seconds
        time.sleep(0.05)
    mariadb.query("DELETE FROM shop.orders")  # the accident
    run("binlogs", "ship", *common, "--flush")
    times = {
        "--to-time": iso_utc(before),
        "--since": iso_utc(before - 600),
        "--until": iso_utc(before + 600),
    }

    ran, skipped = [], []
    for command in commands:
        if (test := _elsewhere(command)) is not None:
            assert test.is_file(), f"{command}: {test} does not exist"
            skipped.append(command)
            continue
        argv = _as_here(command, tmp_path, times)
        target = next((Path(argv[i + 1]) for i, a in enumerate(argv) if a == "--target-datadir"), None)
        if target is not None:
            shutil.rmtree(target, ignore_errors=True)  # the runbook's alternatives share a target
        done = run(*argv)
        ran.append(command)
        if argv[0] == "list" and "--json" in argv:
            assert [b["kind"] for b in json.loads(done.stdout)["backups"]][0] == "full"
        elif target is not None and "--to-time" in argv:
            # The point in time before the accident: every row is back.
            assert restored_checksums(target, tmp_path / "sb-pitr", ["shop"], server_id=931) == good
        elif target is not None:
            assert (target / "ibdata1").is_file(), f"{target} holds no restored datadir"
        elif argv[:2] == ["binlogs", "events"]:
            assert re.search(r"DELETE.*shop\.orders.*--to-gtid=\S+", done.stdout), done.stdout[-3000:]
    verbs = {" ".join(c.split()[1:3]) for c in ran}
    for done_verb in ("list --config", "binlogs list", "verify --config", "restore --config", "binlogs events",
                      "binlogs ship", "backup --config", "restore-test --config"):  # fmt: skip
        assert done_verb in verbs, (
            f"the runbook no longer runs `{done_verb}`, or this test skipped it: {verbs}"
        )
    assert skipped, "every command ran here: drop ELSEWHERE"
