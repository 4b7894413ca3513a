"""Airflow provider for MySQL / MariaDB physical backups (XtraBackup and MariaBackup)."""

__version__ = "0.1.0"
