"""GpgKeysHook: a `gpgkeys` connection holding recipients' public keys and, for restores, a
private key (extra `private_key`) whose passphrase is the connection password.

The connection type was first named `gpg_keys`. Airflow warns on that name (a connection type is
a URI scheme, and a scheme has no `_`), so it is `gpgkeys` now; `gpg_keys` connections keep
working unchanged (the hook reads only the extra and the password) and keep their form in the
UI through `LegacyGpgKeysHook`. The form itself is declared in get_provider_info (`conn-fields`,
`ui-field-behaviour`: what Airflow 3.2+ reads); the methods below give it to Airflow 3.1.
"""

from __future__ import annotations

__all__ = ["GpgKeysHook", "LegacyGpgKeysHook"]

import json
from typing import Any

from airflow.sdk import BaseHook

from ..get_provider_info import GPG_CONN_TYPE, GPG_FORM, LEGACY_GPG_CONN_TYPE


class GpgKeysHook(BaseHook):
    """Extra: {"public_keys": ["-----BEGIN PGP PUBLIC KEY BLOCK-----..."], "private_key": "..."}.

    Backup workers need only the public keys; keep private keys in a separate connection that
    only restore workers can read. `public_keys` may also be one string: a JSON list, or the
    armored block(s) themselves (what Airflow 3.1's form, a text field, stores).
    """

    conn_name_attr = "gpg_conn_id"
    default_conn_name = "backup_gpg"
    conn_type = GPG_CONN_TYPE
    hook_name = "GPG keys (backup encryption)"

    def __init__(self, gpg_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gpg_conn_id = gpg_conn_id

    def _extra(self) -> dict[str, Any]:
        return self.get_connection(self.gpg_conn_id).extra_dejson

    def public_keys(self) -> list[str]:
        extra = self._extra()
        keys = extra.get("public_keys") or ([extra["public_key"]] if extra.get("public_key") else [])
        if isinstance(keys, str):
            keys = self._keys_from_text(keys)
        if not keys:
            raise ValueError(f"connection {self.gpg_conn_id!r} has no public_keys in its extra")
        if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
            raise ValueError(
                f"connection {self.gpg_conn_id!r}: extra public_keys must be a list of armored keys "
                "(or one text holding them)"
            )
        return keys

    def _keys_from_text(self, text: str) -> list[str]:
        if not text.lstrip().startswith("["):
            return [text] if text.strip() else []  # armored block(s): gpg imports every one
        try:
            keys = json.loads(text)
        except ValueError as exc:
            raise ValueError(
                f"connection {self.gpg_conn_id!r}: extra public_keys looks like a JSON list but is not one: {exc}"
            ) from None
        return keys if isinstance(keys, list) else []

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
        """The form on Airflow 3.1 (3.2+ reads `ui-field-behaviour` from get_provider_info)."""
        behaviour = GPG_FORM["ui-field-behaviour"]
        return {
            "hidden_fields": behaviour["hidden-fields"],
            "relabeling": behaviour["relabeling"],
            "placeholders": behaviour["placeholders"],
        }

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The extra fields on Airflow 3.1, which builds them from wtforms (3.2+ reads `conn-fields`)."""
        from flask_appbuilder.fieldwidgets import BS3TextAreaFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import StringField

        return {
            name: StringField(
                lazy_gettext(field["label"]),
                description=field["description"],
                widget=BS3TextAreaFieldWidget(),
            )
            for name, field in GPG_FORM["conn-fields"].items()
        }


class LegacyGpgKeysHook(GpgKeysHook):
    """The same hook under the type's first name, `gpg_keys` (deprecated; create `gpgkeys`)."""

    conn_type = LEGACY_GPG_CONN_TYPE
    hook_name = "GPG keys (deprecated type gpg_keys: use gpgkeys)"
    # Airflow 3.1 looks these up in the class's own __dict__ only.
    get_ui_field_behaviour = GpgKeysHook.__dict__["get_ui_field_behaviour"]
    get_connection_form_widgets = GpgKeysHook.__dict__["get_connection_form_widgets"]
