"""The GPG connection type: its form as Airflow's schemas define it, the old `gpg_keys` name still
read, and the forms `public_keys` can take (a list, a JSON list, armored text) giving keys gpg uses.
(The form as a running api-server serves it: tests/e2e/test_deployment.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import airflow
import jsonschema
import pytest

from xtrabackup_provider.core.pipeline.gpg import GpgHome
from xtrabackup_provider.get_provider_info import GPG_FORM, get_provider_info
from xtrabackup_provider.hooks.gpg import GpgKeysHook, LegacyGpgKeysHook

SCHEMAS = Path(airflow.__file__).parent


def test_provider_info_passes_airflows_own_schemas():
    info = get_provider_info()
    # What ProvidersManager validates at start-up ...
    jsonschema.validate(info, json.loads((SCHEMAS / "provider_info.schema.json").read_text()))
    # ... and the full provider.yaml schema, which defines conn-fields and ui-field-behaviour.
    full = json.loads((SCHEMAS / "provider.yaml.schema.json").read_text())
    item = full["properties"]["connection-types"]["items"]
    if "conn-fields" not in item["properties"]:
        pytest.skip(f"Airflow {airflow.__version__} has no conn-fields in its provider schema")
    types = {conn["connection-type"]: conn for conn in info["connection-types"]}
    assert set(types) == {"gpgkeys", "gpg_keys"}
    for conn in types.values():
        jsonschema.validate(conn, item)
    assert "_" not in "gpgkeys", "a connection type is a URI scheme: no '_'"


def test_both_type_names_have_the_form_and_a_hook_of_their_own_type():
    for hook in (GpgKeysHook, LegacyGpgKeysHook):
        # Airflow 3.1 reads the form from the class's own methods (its own __dict__).
        assert "get_ui_field_behaviour" in vars(hook) and "get_connection_form_widgets" in vars(hook)
        behaviour = hook.get_ui_field_behaviour()
        assert behaviour["hidden_fields"] == GPG_FORM["ui-field-behaviour"]["hidden-fields"]
        assert behaviour["relabeling"] == {"password": "Private key passphrase"}
    assert (GpgKeysHook.conn_type, LegacyGpgKeysHook.conn_type) == ("gpgkeys", "gpg_keys")


@pytest.mark.parametrize("conn_type", ["gpgkeys", "gpg_keys"])
@pytest.mark.parametrize("form", ["list", "json string", "armored text"])
def test_public_keys_in_each_form_give_keys_gpg_encrypts_for(
    conn_type, form, gpg_keys, other_gpg_keys, monkeypatch
):
    keys = [gpg_keys.public_key, other_gpg_keys.public_key]
    value = {"list": keys, "json string": json.dumps(keys), "armored text": "\n".join(keys)}[form]
    monkeypatch.setenv(
        "AIRFLOW_CONN_XBP_GPG_FORMS", json.dumps({"conn_type": conn_type, "extra": {"public_keys": value}})
    )
    got = GpgKeysHook("xbp_gpg_forms").public_keys()
    with GpgHome() as home:
        fingerprints = [fpr for key in got for fpr in home.import_keys(key, "public key")]
    assert sorted(fingerprints) == sorted([gpg_keys.fingerprint, other_gpg_keys.fingerprint])


@pytest.mark.parametrize(
    ("public_keys", "mention"),
    [
        ("", "has no public_keys"),
        ("[not json", "looks like a JSON list but is not one"),
        ([1, 2], "must be a list of armored keys"),
    ],
)
def test_bad_public_keys_are_refused_naming_the_connection(public_keys, mention, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_XBP_GPG_BAD",
        json.dumps({"conn_type": "gpgkeys", "extra": {"public_keys": public_keys}}),
    )
    with pytest.raises(ValueError, match=mention) as info:
        GpgKeysHook("xbp_gpg_bad").public_keys()
    assert "'xbp_gpg_bad'" in str(info.value)
