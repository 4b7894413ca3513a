"""The provider registers with Airflow: entry point, importable modules, connection type."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

from xtrabackup_provider.get_provider_info import get_provider_info


def test_every_listed_module_and_hook_class_imports():
    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-xtrabackup"
    modules = [m for group in info["operators"] + info["hooks"] for m in group["python-modules"]]
    for name in modules:
        importlib.import_module(name)
    for conn in info["connection-types"]:
        module, _, cls = conn["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), cls)
        assert hook.conn_type == conn["connection-type"]


def test_airflow_cli_lists_the_provider():
    airflow = Path(sys.executable).with_name("airflow")
    proc = subprocess.run(
        [str(airflow), "providers", "get", "airflow-provider-xtrabackup", "-o", "json"],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(proc.stdout[proc.stdout.index("[") :])
    assert rows[0]["Provider"] == "airflow-provider-xtrabackup"


def test_the_version_is_one_the_changelog_describes():
    from importlib.metadata import version

    import xtrabackup_provider

    info = get_provider_info()
    assert info["versions"][0] == xtrabackup_provider.__version__ == version("airflow-provider-xtrabackup")
    changelog = (Path(__file__).resolve().parents[2] / "CHANGELOG.md").read_text()
    for release in info["versions"]:
        assert f"## [{release}] - " in changelog, f"CHANGELOG.md has no section for {release}"
    assert changelog.index(f"## [{info['versions'][0]}]") < changelog.index(f"## [{info['versions'][-1]}]")
