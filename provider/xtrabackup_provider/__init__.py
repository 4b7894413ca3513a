"""Airflow provider for MySQL / MariaDB physical backups (XtraBackup and MariaBackup)."""

__version__ = "0.2.0"
# Every release, newest first (get_provider_info's "versions"; CHANGELOG.md has a section each).
RELEASES = ("0.2.0", "0.1.0")
