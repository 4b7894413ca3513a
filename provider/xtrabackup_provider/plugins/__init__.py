"""Airflow plugins shipped with the provider: the Backups view (backups_view.py), registered through
the `airflow.plugins` entry point so that installing the package is enough."""
