"""Airflow-free library: all backup, storage, catalog and restore logic lives here."""
