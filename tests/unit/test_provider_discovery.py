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


def test_the_backups_view_plugin_is_found_once():
    """Airflow loads entry-point plugins from every distribution it finds: an editable install's
    build left a second copy of our metadata (provider/*.egg-info) on sys.path, and every Airflow
    command warned `Plugin 'xtrabackup_backups_view' already registered, skipping` (make setup now
    removes it)."""
    from importlib.metadata import distributions

    # What Airflow's loader iterates (each distribution's entry points, not deduplicated by name).
    ours = [d for d in distributions() if d.metadata["Name"] == "airflow-provider-xtrabackup"]
    assert len(ours) == 1, [str(getattr(d, "_path", d)) for d in ours]
    plugins = [e for e in ours[0].entry_points if e.group == "airflow.plugins"]
    assert [e.name for e in plugins] == ["xtrabackup_backups_view"]
