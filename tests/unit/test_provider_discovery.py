"""Airflow finds the provider through its entry point and can import the module name it derives."""

from __future__ import annotations

import importlib


def test_airflow_lists_the_provider_and_imports_its_derived_module_name():
    from airflow.providers_manager import ProvidersManager

    providers = ProvidersManager().providers
    assert "airflow-provider-xtrabackup" in providers
    # The example-DAG discovery derives the import name from the distribution name (no error logged).
    module = importlib.import_module("airflow-provider-xtrabackup".replace("-", "_"))
    assert module.__doc__
