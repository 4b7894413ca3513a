"""The Backups view over the backups the shipped DAGs took in test_airflow_deployment.py: its rows
equal `check --json` at the same instant, every backup and restore test links to the DAG run and
task that made it (runs that exist), nothing secret is served, and the page renders in chromium
inside Airflow's UI (screenshots kept in $XBP_SCREENSHOTS)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml
from airflow_stack import BIN, AirflowStack
from browser import Browser, keep


def check_json(stack: AirflowStack, endpoint: str, as_of: str) -> dict[str, dict[str, Any]]:
    """`check --json` from a DBA's shell: the same fleet config, the endpoint and keys for the CLI."""
    config = yaml.safe_load(stack.fleet_config.read_text())
    config["storage"] |= {"endpoint_url": endpoint, "region": "us-east-1"}
    cli_config = stack.work / "fleet-cli.yaml"
    cli_config.write_text(yaml.safe_dump(config))
    env = {"PATH": os.environ["PATH"], "HOME": str(stack.work), "AWS_ACCESS_KEY_ID": "dba",
           "AWS_SECRET_ACCESS_KEY": "dba"}  # fmt: skip
    proc = subprocess.run(
        [str(BIN / "xtrabackup-provider"), "check", "--config", str(cli_config), "--json", "--as-of", as_of],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode in (0, 1, 2), proc.stderr
    return {row["host"]: row for row in json.loads(proc.stdout)}


def check_backups_view(
    stack: AirflowStack, endpoint: str, backup_dag: str, runs: set[str], restore: tuple[str, str], secrets: list[str],
    shots: Path,
) -> None:  # fmt: skip
    fleet = stack.rest("GET", "/xtrabackup/api/fleet")
    rows = {r["host"]: r for r in fleet["hosts"]}
    cli = check_json(stack, endpoint, fleet["hosts"][0]["checked_at"])
    assert set(rows) == set(cli)
    for host, row in rows.items():
        assert {k: row[k] for k in cli[host]} == cli[host], host
        assert row["chain_length"] == 1 and (row["last_verified"] is not None) == (host == "db2"), row

    detail = stack.rest("GET", "/xtrabackup/api/hosts/deploy/db2")
    made = {(b["origin"]["dag_id"], b["origin"]["run_id"], b["origin"]["task_id"]) for b in detail["backups"]}
    assert made == {(backup_dag, run, "backup.backup") for run in runs}, made
    (test,) = detail["restore_tests"]
    assert (test["origin"]["dag_id"], test["origin"]["run_id"], test["origin"]["task_id"]) == (
        *restore,
        "restore_latest_chain",
    )
    assert [b["backup_id"] for b in detail["backups"] if b["proved_by"]] == test["chain"]
    for origin in [b["origin"] for b in detail["backups"]] + [test["origin"]]:
        stack.rest(
            "GET", f"/api/v2/dags/{origin['dag_id']}/dagRuns/{origin['run_id']}"
        )  # the link's run exists
    served = json.dumps(fleet) + json.dumps(detail)
    assert [i for i, s in enumerate(secrets) if s in served] == []

    browser = Browser(shots)
    try:
        browser.set_cookie(stack.api, "_token", str(stack._token))  # the JWT rest() signed in with
        browser.goto(f"{stack.api}/plugin/backups")
        hosts = browser.wait_for("the fleet in the UI", "[...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.host)",
                                 frame="xtrabackup/")  # fmt: skip
        assert sorted(hosts) == ["deploy/db1", "deploy/db2"], hosts
        keep(browser.screenshot(shots / "deploy-fleet.png"), "deploy-fleet.png")
        browser.goto(f"{stack.api}/xtrabackup/host.html?cluster=deploy&host=db2")
        assert browser.wait_for("db2's chain", "document.querySelectorAll('.node').length") == 2
        links = browser.js("[...document.querySelectorAll('a.run-link')].map(a => a.href)")
        assert {link.rsplit("/runs/", 1)[1] for link in links} >= {
            r.replace(":", "%3A").replace("+", "%2B") for r in runs
        }
        keep(browser.screenshot(shots / "deploy-host.png"), "deploy-host.png")
    finally:
        browser.close()
