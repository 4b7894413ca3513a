"""The Backups view's FastAPI app (mounted at /xtrabackup by backups_view.py): the JSON the page
reads, and the page itself (static/).

    GET api/fleet[?cluster=C&status=S]   one row per host, worst first (core/report/view.py)
    GET api/hosts/{cluster}/{host}       one host's chains, restore tests, binlog coverage, copies

Airflow authenticates its own API, not a plugin's: every JSON route here depends on the core API's
own `get_user` (the `Authorization: Bearer` JWT or the UI's `_token` cookie, checked by the auth
manager; none: 401, a bad token: 403), and a cluster is shown only to users the auth manager lets
read its backup DAG `mysql_backup_<cluster>` (`is_authorized_dag`, GET); a host page of any other
cluster answers exactly as one of a host that does not exist (404). The page's HTML and script are
public: they hold no data.

What is served comes from manifests and restore reports (no secrets: no keys, no connection
fields). The fleet config comes from $XTRABACKUP_FLEET_CONFIG as for the DAGs; the stores from
the DAGs' Airflow connections. Settings (airflow.cfg section [xtrabackup]):
  view_cache_seconds (60): how long a host's catalog reading is reused;
  view_read_timeout_seconds (10): how long a request waits for a host's catalog; a host that takes
    longer shows as critical ("did not answer within ...") while its reading goes on.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.staticfiles import StaticFiles

from ..core.config.load import load_config
from ..core.config.schema import FleetConfig
from ..core.report.check import STATUSES
from ..core.report.view import FleetCache, HostView, fleet_payload, host_readers
from ..core.storage.base import ObjectStore

STATIC = Path(__file__).parent / "static"
SECTION = "xtrabackup"
User = Annotated[BaseUser, Depends(get_user)]


def backup_dag_id(cluster: str) -> str:
    return f"mysql_backup_{cluster}"


def readable_clusters(user: BaseUser, config: FleetConfig) -> list[str]:
    """The clusters whose backup DAG the auth manager lets `user` read."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    manager = get_auth_manager()
    return [
        c.name
        for c in config.clusters
        if manager.is_authorized_dag(method="GET", details=DagDetails(id=backup_dag_id(c.name)), user=user)
    ]


class Fleet:
    """The config, the stores built from it (once per version of the file) and the cache."""

    def __init__(self) -> None:
        from airflow.configuration import conf

        self.ttl = conf.getfloat(SECTION, "view_cache_seconds", fallback=60.0)
        self.bound = conf.getfloat(SECTION, "view_read_timeout_seconds", fallback=10.0)
        self.cache = FleetCache(self.ttl, self.bound)
        self._stores: tuple[FleetConfig, dict[str, ObjectStore]] | None = None
        self._lock = threading.Lock()

    def stores(self, config: FleetConfig) -> dict[str, ObjectStore]:
        from ..hooks.storage import BackupStorageHook

        with self._lock:
            if self._stores is None or self._stores[0] is not config:
                built = {
                    t.name: BackupStorageHook(
                        t.aws_conn_id, t.bucket, t.local_path, timeout=self.bound
                    ).get_store()
                    for t in config.targets()
                }
                self._stores = (config, built)
                self.cache.clear()
            return self._stores[1]

    def views(
        self, config: FleetConfig, clusters: list[str], host: str | None = None
    ) -> tuple[list[HostView], datetime]:
        now = datetime.now(UTC)
        readers = host_readers(config, self.stores(config), clusters)
        if host is not None:
            readers = {key: read for key, read in readers.items() if key[1] == host}
        return self.cache.views(readers, now), now


def create_app() -> FastAPI:
    app = FastAPI(
        title="Backups (airflow-provider-xtrabackup)", docs_url=None, redoc_url=None, openapi_url=None
    )
    fleet = Fleet()

    @app.get("/api/fleet")
    def fleet_rows(
        user: User,
        cluster: Annotated[list[str] | None, Query()] = None,
        status: Annotated[list[str] | None, Query()] = None,
    ) -> dict[str, Any]:
        config = load_config()
        allowed = readable_clusters(user, config)
        shown = [c for c in allowed if not cluster or c in cluster]
        views, now = fleet.views(config, shown)
        payload = fleet_payload(views, now)
        if status:
            payload["hosts"] = [r for r in payload["hosts"] if r["status"] in status]
        return payload | {"clusters": allowed, "statuses": list(STATUSES)}

    @app.get("/api/hosts/{cluster}/{host}")
    def host_detail(cluster: str, host: str, user: User) -> dict[str, Any]:
        config = load_config()
        # Authorized first, and one answer for a host that does not exist and one the user may not
        # read: else the answers tell which clusters and hosts exist where the user may not look.
        readable = cluster in readable_clusters(user, config)
        if not readable or not any(
            c.name == cluster and any(h.name == host for h in c.hosts) for c in config.clusters
        ):
            raise HTTPException(
                404,
                f"no host {cluster}/{host} that you may read: it is not in the fleet config, or the auth "
                f"manager does not let you read DAG {backup_dag_id(cluster)}",
            )
        (view,), _now = fleet.views(config, [cluster], host)
        return fleet.cache.detail(view)

    app.mount("/", StaticFiles(directory=STATIC, html=True), name="page")
    return app
