"""Fixtures of the fault suite (the shared ones come from tests/conftest.py)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from faultkit import S3Proxy


@pytest.fixture
def proxy(s3_server) -> Iterator[S3Proxy]:
    """faultkit's S3 proxy in front of the session's moto endpoint; set its `rule` to inject faults."""
    proxy = S3Proxy(s3_server.endpoint_url)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The shipped-DAG fixtures live with the DAG tests; reuse them rather than copy them.
_DAGS = Path(__file__).resolve().parents[1] / "dags"
fleet = _load("xbp_faults_dags_conftest", _DAGS / "conftest.py").fleet


_dag_helpers = _load("xbp_faults_dag_helpers", _DAGS / "dag_helpers.py")


@pytest.fixture
def load_dag():
    """`load_dag("mysql_backup")` imports a shipped DAG file afresh, as the dag processor does."""
    return _dag_helpers.load_dag_module


@pytest.fixture
def run_dag():
    """`run_dag(dag, **kw)`: dag.test() of the DAG as the test built it (tests/dags/dag_helpers.py)."""
    return _dag_helpers.run_dag
