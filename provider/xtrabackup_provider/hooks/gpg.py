"""GpgKeysHook: a `gpg_keys` connection holding recipients' public keys and, for restores,
a private key (extra `private_key`) whose passphrase is the connection password."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook


class GpgKeysHook(BaseHook):
    """Extra: {"public_keys": ["-----BEGIN PGP PUBLIC KEY BLOCK-----..."], "private_key": "..."}.

    Backup workers need only the public keys; keep private keys in a separate connection that
    only restore workers can read.
    """

    conn_name_attr = "gpg_conn_id"
    default_conn_name = "backup_gpg"
    conn_type = "gpg_keys"
    hook_name = "GPG keys"

    def __init__(self, gpg_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gpg_conn_id = gpg_conn_id

    def _extra(self) -> dict[str, Any]:
        return self.get_connection(self.gpg_conn_id).extra_dejson

    def public_keys(self) -> list[str]:
        extra = self._extra()
        keys = extra.get("public_keys") or ([extra["public_key"]] if extra.get("public_key") else [])
        if not keys:
            raise ValueError(f"connection {self.gpg_conn_id!r} has no public_keys in its extra")
        return list(keys)

    def private_key(self) -> tuple[str, str | None]:
        conn = self.get_connection(self.gpg_conn_id)
        key = conn.extra_dejson.get("private_key")
        if not key:
            raise ValueError(
                f"connection {self.gpg_conn_id!r} has no private_key in its extra; restores need it"
            )
        return key, conn.password

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["host", "schema", "port", "login"],
            "relabeling": {"password": "Private key passphrase"},
        }
