"""Provider metadata for Airflow's providers manager (the `apache_airflow_provider` entry point).

Kept import-light: Airflow calls it at start-up in every process.
"""

from __future__ import annotations

from typing import Any

from . import RELEASES

P = "xtrabackup_provider"
GPG_CONN_TYPE = "gpgkeys"
# The type's first name: Airflow warns on it (a connection type is a URI scheme, and a scheme has
# no '_'). Deprecated: its connections keep working, new ones are gpgkeys.
LEGACY_GPG_CONN_TYPE = "gpg_keys"
# The GPG connection's form. Airflow 3.2+ builds it from these provider-info keys (no hook
# import); GpgKeysHook gives the same to Airflow 3.1 through its own methods.
GPG_FORM: dict[str, Any] = {
    "ui-field-behaviour": {
        "hidden-fields": ["host", "schema", "port", "login"],
        "relabeling": {"password": "Private key passphrase"},
        "placeholders": {"password": "only with a private key (restore connections)"},
    },
    "conn-fields": {
        "public_keys": {
            "label": "Public keys",
            "description": "ASCII-armored public keys of the backup recipients, one item per key",
            "schema": {"type": ["array", "null"], "items": {"type": "string"}},
        },
        "private_key": {
            "label": "Private key",
            "description": "ASCII-armored private key, for restore connections only: keep it out of "
            "the connection that backup workers read",
            "schema": {"type": ["string", "null"], "format": "multiline"},
        },
    },
}


# The Backups view's settings (plugins/backups_api.py), listed by `airflow config list`.
VIEW_CONFIG: dict[str, Any] = {
    "xtrabackup": {
        "description": "The Backups view in Airflow's UI (docs/UI.md).",
        "options": {
            "view_cache_seconds": {
                "description": "How long a host's catalog reading is reused by the Backups view.",
                "version_added": "0.2.0",
                "type": "float",
                "example": "60",
                "default": "60",
            },
            "view_read_timeout_seconds": {
                "description": "How long a request of the Backups view waits for a host's catalog; a host "
                "that takes longer shows as critical while its reading goes on.",
                "version_added": "0.2.0",
                "type": "float",
                "example": "10",
                "default": "10",
            },
        },
    }
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-xtrabackup",
        "name": "XtraBackup / MariaBackup",
        "description": "Physical MySQL/MariaDB backups: incremental chains, zstd+GPG streaming to S3, "
        "binlog shipping, checksum gates, retention and restore tests.",
        "versions": list(RELEASES),
        "integrations": [
            {
                "integration-name": "XtraBackup",
                "external-doc-url": "https://docs.percona.com/percona-xtrabackup/8.0/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "XtraBackup",
                "python-modules": [
                    f"{P}.operators.backup",
                    f"{P}.operators.restore",
                    f"{P}.operators.prepare",
                    f"{P}.operators.standby",
                    f"{P}.operators.restore_test",
                    f"{P}.operators.checksum",
                    f"{P}.operators.retention",
                    f"{P}.operators.lifecycle",
                    f"{P}.operators.glacier",
                    f"{P}.operators.verify",
                    f"{P}.operators.files",
                    f"{P}.operators.binlog",
                    f"{P}.operators.pitr",
                    f"{P}.operators.copies",
                    f"{P}.operators.check",
                    f"{P}.operators.provision",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "XtraBackup",
                "python-modules": [
                    f"{P}.sensors.checksum",
                    f"{P}.sensors.glacier",
                    f"{P}.sensors.binlog",
                    f"{P}.sensors.replica",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "XtraBackup",
                "python-modules": [
                    f"{P}.triggers.checksum",
                    f"{P}.triggers.glacier",
                    f"{P}.triggers.binlog",
                    f"{P}.triggers.replica",
                ],
            }
        ],
        "hooks": [
            {
                "integration-name": "XtraBackup",
                "python-modules": [f"{P}.hooks.xtrabackup", f"{P}.hooks.storage", f"{P}.hooks.gpg"],
            }
        ],
        "config": VIEW_CONFIG,
        "connection-types": [
            {
                "connection-type": GPG_CONN_TYPE,
                "hook-class-name": f"{P}.hooks.gpg.GpgKeysHook",
                "hook-name": "GPG keys (backup encryption)",
                **GPG_FORM,
            },
            {
                "connection-type": LEGACY_GPG_CONN_TYPE,
                "hook-class-name": f"{P}.hooks.gpg.LegacyGpgKeysHook",
                "hook-name": "GPG keys (deprecated type gpg_keys: use gpgkeys)",
                **GPG_FORM,
            },
        ],
    }
