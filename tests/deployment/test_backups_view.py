"""The Backups view (xtrabackup_provider/plugins/) on Airflow's own api-server, installed as a user
installs it (the package's `airflow.plugins` entry point, nothing copied into a plugins folder):

- auth on: the auth manager decides. Anonymous requests get 401, a forged token 403; each user
  sees only the clusters whose backup DAG (`mysql_backup_<cluster>`) the auth manager lets them
  read. The auth manager here is Airflow's SimpleAuthManager with DAG-level grants added (it has
  roles only); the view asks it `is_authorized_dag`, as it would ask FAB or Keycloak's.
- auth off (SimpleAuthManager's all-admins mode): anyone sees every cluster.
- a fleet row equals `xtrabackup-provider check --json` for that host, measured at the same instant.
- the page in a real browser (chromium over the DevTools protocol) inside Airflow's UI: the fleet
  page worst host first, a host's page with its chains, the restore test that proved them, the
  binlog gap, and links to the DAG run and task log; screenshots kept in $XBP_SCREENSHOTS.

The catalog is written as the product writes it (tests/fleet_factory.py); the real backups taken
by the shipped DAGs are shown by test_airflow_deployment.py.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow_stack import BIN, AirflowStack
from browser import Browser, keep

from fleet_factory import write_host
from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.storage.local import LocalStore

# alpha/db1 all well; alpha/db2 backed up 3 days ago (critical: RPO); beta/db3 never restore-tested
# (warning) with a binlog gap.
HOSTS = {
    ("alpha", "db1"): {},
    ("alpha", "db2"): {"stale": True},
    ("beta", "db3"): {"tested": False, "gap_at": 7},
}
ORIGIN = {"dag_id": "mysql_backup_alpha", "run_id": "scheduled__2026-12-01T00:00:00+00:00",
          "task_id": "backup.backup", "try_number": 1}  # fmt: skip
# A user's DAG-level grants, read by the auth manager below (users not listed: their role decides).
GRANTS = {"alice": ["mysql_backup_alpha"], "bob": []}
AUTH_MANAGER = '''"""SimpleAuthManager with DAG-level grants from $AIRFLOW_HOME/dag_grants.json (test only)."""
import json
import os
from pathlib import Path

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


class DagGrantsAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None):
        grants = json.loads(Path(os.environ["AIRFLOW_HOME"], "dag_grants.json").read_text())
        if user.username in grants and (details is None or details.id not in grants[user.username]):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
'''
PASSWORDS = {"ops": "ops-pw-1", "alice": "alice-pw-2", "bob": "bob-pw-3"}


def _write_fleet(root: Path, now: datetime) -> Path:
    store = LocalStore(root / "store")
    for (cluster, host), how in HOSTS.items():
        when = now - timedelta(days=3) if how.get("stale") else now
        write_host(Catalog(store, "backups", cluster, host), when, tested=how.get("tested", True),
                   gap_at=how.get("gap_at"), binlogs=4, origin=dict(ORIGIN, dag_id=f"mysql_backup_{cluster}"))  # fmt: skip
    fleet = root / "fleet.yaml"
    clusters: dict[str, list[dict[str, Any]]] = {}
    for cluster, host in HOSTS:
        clusters.setdefault(cluster, []).append({"name": host})
    fleet.write_text(
        yaml.safe_dump(
            {
                "storage": {"local_path": str(root / "store"), "prefix": "backups"},
                "clusters": [
                    {"name": c, "binlogs": {}, "check": {"binlog_max_lag_minutes": 600}, "hosts": hosts}
                    for c, hosts in clusters.items()
                ],
            }
        )
    )
    return fleet


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    work = tmp_path_factory.mktemp("view")
    fleet = _write_fleet(work, datetime.now(UTC).replace(microsecond=0))
    stack = AirflowStack(work)
    stack.extra_env["XTRABACKUP_FLEET_CONFIG"] = str(fleet)
    (stack.home / "passwords.json").write_text(json.dumps(PASSWORDS))
    (stack.home / "dag_grants.json").write_text(json.dumps(GRANTS))
    (stack.home / "config" / "xbp_dag_auth.py").write_text(AUTH_MANAGER)
    try:
        stack.cli("db", "migrate", timeout=600)
        yield stack
    finally:
        stack.close()


def start_api(stack: AirflowStack, **env: str) -> None:
    if "api-server" in stack.procs:
        stack.stop("api-server")
    stack.start("api-server", [str(BIN / "airflow"), "api-server", "--port", str(stack.api_port),
                               "--host", "127.0.0.1"], **env)  # fmt: skip
    stack.wait("the api-server", stack.healthy, 420)


def auth_on(stack: AirflowStack) -> None:
    start_api(stack, AIRFLOW__CORE__AUTH_MANAGER="xbp_dag_auth.DagGrantsAuthManager",
              AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="ops:admin,alice:viewer,bob:viewer")  # fmt: skip


def token(stack: AirflowStack, user: str) -> str:
    body = json.dumps({"username": user, "password": PASSWORDS[user]}).encode()
    req = urllib.request.Request(f"{stack.api}/auth/token", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return str(json.load(resp)["access_token"])


def get(stack: AirflowStack, path: str, bearer: str | None = None) -> tuple[int, Any]:
    headers = {"Accept": "application/json"} | ({"Authorization": f"Bearer {bearer}"} if bearer else {})
    req = urllib.request.Request(f"{stack.api}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            body = resp.read()
            return resp.status, json.loads(body) if "json" in resp.headers.get("Content-Type", "") else body
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def check_json(stack: AirflowStack, cluster: str, as_of: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [str(BIN / "xtrabackup-provider"), "check", "--config", str(stack.fleet_config), "--cluster", cluster,
         "--json", "--as-of", as_of],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1, 2) and "error" not in proc.stderr, proc.stderr
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    return rows


def test_auth_on_each_user_sees_the_clusters_whose_backup_dag_they_may_read(view):
    auth_on(view)
    assert get(view, "/xtrabackup/api/fleet")[0] == 401
    assert get(view, "/xtrabackup/api/fleet", bearer="not-a-jwt")[0] == 403
    assert get(view, "/xtrabackup/api/hosts/alpha/db1")[0] == 401

    status, fleet = get(view, "/xtrabackup/api/fleet", token(view, "ops"))
    assert status == 200, fleet
    assert [(r["cluster"], r["host"], r["status"]) for r in fleet["hosts"]] == [
        ("alpha", "db2", "critical"), ("beta", "db3", "warning"), ("alpha", "db1", "ok"),
    ]  # worst first  # fmt: skip
    assert fleet["clusters"] == ["alpha", "beta"]

    # Each row carries `check --json`'s fields for its host, equal at the same instant.
    for row in fleet["hosts"]:
        (cli,) = [c for c in check_json(view, row["cluster"], row["checked_at"]) if c["host"] == row["host"]]
        assert {k: row[k] for k in cli} == cli

    _status, alice = get(view, "/xtrabackup/api/fleet", token(view, "alice"))
    assert (alice["clusters"], {r["cluster"] for r in alice["hosts"]}) == (["alpha"], {"alpha"})
    assert get(view, "/xtrabackup/api/hosts/beta/db3", token(view, "alice"))[0] == 404
    assert get(view, "/xtrabackup/api/hosts/alpha/db1", token(view, "alice"))[0] == 200
    _status, bob = get(view, "/xtrabackup/api/fleet", token(view, "bob"))
    assert (bob["clusters"], bob["hosts"]) == ([], [])
    assert get(view, "/xtrabackup/api/hosts/alpha/nosuch", token(view, "ops"))[0] == 404

    # Nothing secret is served: no password, no key material, no connection fields.
    _status, host = get(view, "/xtrabackup/api/hosts/beta/db3", token(view, "ops"))
    served = json.dumps(fleet) + json.dumps(host)
    assert not [s for s in [*PASSWORDS.values(), "BEGIN PGP", "password", "extra_dejson"] if s in served]
    # The page is registered in Airflow's navigation through the package's entry point.
    _status, plugins = get(view, "/api/v2/plugins", token(view, "ops"))
    views = [v for p in plugins["plugins"] for v in p["external_views"] if v.get("url_route") == "backups"]
    assert views == [views[0]] and views[0]["href"] == "xtrabackup/", views


def test_a_user_cannot_tell_the_hosts_of_a_cluster_they_may_not_read_from_hosts_that_do_not_exist(view):
    """On main alice (alpha only) got 403 for beta/db3 and 404 for beta/nosuch and nosuch/db3: the
    answers told her beta and its db3 exist. Now each is the same 404, its body naming only what
    she asked for."""
    if "api-server" not in view.procs:
        auth_on(view)
    alice = token(view, "alice")

    def answer(cluster: str, host: str) -> tuple[int, str]:
        status, body = get(view, f"/xtrabackup/api/hosts/{cluster}/{host}", alice)
        said = body.decode().replace(f"{cluster}/{host}", "<cluster>/<host>")
        return status, said.replace(f"mysql_backup_{cluster}", "mysql_backup_<cluster>")

    existing = answer("beta", "db3")
    assert existing == answer("beta", "nosuch") == answer("nosuch", "db3") == answer("other", "other")
    assert existing == answer("alpha", "nosuch"), "a readable cluster's unknown host: the same answer"
    assert existing[0] == 404 and "<cluster>/<host>" in existing[1], existing
    assert get(view, "/xtrabackup/api/hosts/alpha/db1", alice)[0] == 200


def test_host_detail_has_chains_proofs_gaps_and_the_runs_that_made_them(view):
    if "api-server" not in view.procs:
        auth_on(view)
    _status, host = get(view, "/xtrabackup/api/hosts/beta/db3", token(view, "ops"))
    chains = {b["chain_root"] for b in host["backups"]}
    assert len(host["backups"]) == 8 and len(chains) == 2
    assert {b["storage_class"] for b in host["backups"]} == {"STANDARD", "STANDARD_IA"}
    assert all(b["origin"]["dag_id"] == "mysql_backup_beta" for b in host["backups"])
    assert host["restore_tests"] == [] and host["row"]["last_verified"] is None
    ((server,),) = [host["binlogs"]]
    assert [g["first_missing"] for g in server["gaps"]] == ["mysql-bin.000007"]
    _status, db1 = get(view, "/xtrabackup/api/hosts/alpha/db1", token(view, "ops"))
    (test,) = db1["restore_tests"]
    proved = [b["backup_id"] for b in db1["backups"] if b["proved_by"]]
    assert proved == test["chain"] and len(proved) == 4  # the newest chain, full + 3 incrementals
    assert [c["name"] for c in test["results"]] == ["innochecksum", "check_table", "roll_forward"]


def test_auth_off_serves_everyone(view):
    """All-admins mode: a token for the asking (GET /auth/token, what the UI's login redirect does);
    an anonymous request is treated exactly as Airflow's own API treats it (3.3 lets it in, 3.1
    sends the UI to that login first)."""
    start_api(view, AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True")
    try:
        _status, login = get(view, "/auth/token")
        status, fleet = get(view, "/xtrabackup/api/fleet", login["access_token"])
        assert status == 200, fleet
        assert {(r["cluster"], r["host"]) for r in fleet["hosts"]} == set(HOSTS)
        assert get(view, "/xtrabackup/api/fleet")[0] == get(view, "/api/v2/dags")[0]
    finally:
        view.stop("api-server")


def test_the_page_in_a_browser_inside_airflows_ui(view, tmp_path):
    auth_on(view)
    browser = Browser(tmp_path)
    try:
        # Signed in as the UI's login does it: the JWT in Airflow's `_token` cookie.
        browser.set_cookie(view.api, "_token", token(view, "alice"))
        browser.goto(f"{view.api}/plugin/backups")
        hosts = browser.wait_for(
            "the fleet table in the UI's iframe",
            "document.querySelectorAll('#fleet tbody tr').length && [...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.host + ' ' + r.dataset.status)",
            frame="xtrabackup/",
        )
        assert hosts == ["alpha/db2 critical", "alpha/db1 ok"]  # alice reads alpha only; worst first
        assert browser.js("document.querySelectorAll('#fleet .pitr .win').length", frame="xtrabackup/") == 2
        fleet_png = keep(browser.screenshot(tmp_path / "fleet.png"), "fleet.png")

        browser.set_cookie(view.api, "_token", token(view, "ops"))
        browser.goto(f"{view.api}/xtrabackup/host.html?cluster=alpha&host=db1")
        nodes = browser.wait_for("the chain timeline", "document.querySelectorAll('.node').length")
        assert nodes == 8
        assert browser.js("document.querySelectorAll('.node.proved').length") == 4
        runs = browser.js("[...document.querySelectorAll('#backups a.run-link')].map(a => a.href)")
        assert runs and all(
            r.startswith(f"{view.api}/dags/mysql_backup_alpha/runs/scheduled__") for r in runs
        ), runs
        logs = browser.js("[...document.querySelectorAll('#backups a.log-link')].map(a => a.href)")
        assert logs[0].endswith("/tasks/backup.backup/mapped/0?try_number=1"), logs
        host_png = keep(browser.screenshot(tmp_path / "host.png"), "host.png")
        assert fleet_png.stat().st_size > 10_000 and host_png.stat().st_size > 10_000
    finally:
        browser.close()
