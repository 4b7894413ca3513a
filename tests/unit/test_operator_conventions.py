"""The amazon provider's conventions, on every operator and sensor Airflow registers from this
provider: connection ids and `local_path` are templated, and `deferrable` defaults to the
deployment's `[operators] default_deferrable`."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys

import pytest

from xtrabackup_provider.get_provider_info import get_provider_info


def _classes() -> list[type]:
    found = []
    for key in ("operators", "sensors"):
        for entry in get_provider_info()[key]:
            for name in entry["python-modules"]:
                module = importlib.import_module(name)
                found += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == name]
    return [c for c in found if hasattr(c, "template_fields")]


def _arguments(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith("xtrabackup_provider") and "__init__" in vars(klass):
            names |= set(inspect.signature(klass.__init__).parameters)
    return names


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: c.__name__)
def test_connection_ids_and_local_paths_are_templated(cls):
    wanted = {a for a in _arguments(cls) if a.endswith(("conn_id", "conn_ids", "local_path"))}
    assert wanted - set(cls.template_fields) == set()


def test_templated_connection_ids_render_into_the_operator():
    from airflow.sdk import DAG

    from xtrabackup_provider.operators.backup import XtraBackupOperator

    with DAG("conventions", schedule=None, params={"env": "prod"}):
        op = XtraBackupOperator(
            task_id="backup",
            cluster="main",
            host="db1",
            mysql_conn_id="mysql_{{ params.env }}_db1",
            aws_conn_id="aws_{{ params.env }}",
            gpg_conn_id="gpg_{{ params.env }}",
            local_path="/srv/{{ params.env }}/backups",
        )
    op.render_template_fields({"params": {"env": "prod"}})
    assert (op.mysql_conn_id, op.aws_conn_id, op.gpg_conn_id, op.local_path) == (
        "mysql_prod_db1",
        "aws_prod",
        "gpg_prod",
        "/srv/prod/backups",
    )


DEFAULTS = """
import inspect
import json
from xtrabackup_provider.sensors.binlog import BinlogLagSensor
from xtrabackup_provider.sensors.checksum import ReplicaChecksumSensor
from xtrabackup_provider.sensors.glacier import GlacierRestoreSensor
from xtrabackup_provider.sensors.replica import ReplicaCaughtUpSensor
sensors = [BinlogLagSensor, ReplicaChecksumSensor, GlacierRestoreSensor, ReplicaCaughtUpSensor]
print(json.dumps({s.__name__: inspect.signature(s).parameters["deferrable"].default for s in sensors}))
"""


@pytest.mark.parametrize("setting", ["True", "False"])
def test_deferrable_defaults_to_the_deployments_default_deferrable(setting):
    env = os.environ | {"AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": setting}
    done = subprocess.run(
        [sys.executable, "-c", DEFAULTS], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    defaults = json.loads(done.stdout.strip().splitlines()[-1])
    assert defaults == dict.fromkeys(defaults, setting == "True") and len(defaults) == 4
