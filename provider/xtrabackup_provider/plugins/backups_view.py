"""The Backups view inside Airflow's UI: a page in the navigation ("Browse" > "Backups") that shows
every host's recovery state, served by a FastAPI app under /xtrabackup (backups_api.py).

Registered through the `airflow.plugins` entry point (pyproject.toml), which Airflow loads in every
process: so this module stays import-light and the app is built on its first request, in the
api-server only. Not also listed under provider info "plugins": with lazy provider discovery off,
Airflow would load it twice and record the second as a plugin import error.

The page is plain HTML + JavaScript (static/), shown by the UI in an iframe (`external_views`, the
same on Airflow 3.1 and 3.3, no build step); its relative paths work behind a proxy's prefix.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/xtrabackup"


class LazyApp:
    """An ASGI app that builds the real one (backups_api.create_app) when first called."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            from .backups_api import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class BackupsViewPlugin(AirflowPlugin):
    name = "xtrabackup_backups_view"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "Backups (xtrabackup provider)"}]
    external_views = [
        {
            "name": "Backups",
            # Relative (the UI's <base> is Airflow's base URL), so a proxy's path prefix is kept.
            "href": URL_PREFIX.lstrip("/") + "/",
            "url_route": "backups",
            "destination": "nav",
            "category": "browse",
        }
    ]
