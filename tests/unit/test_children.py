"""Child processes: the environment they start with, and what their stderr is summarised to."""

from __future__ import annotations

import json
import sys

from xtrabackup_provider.core.common import children

SECRETS = {
    "XTRABACKUP_GPG_PASSPHRASE": "pp-secret",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "sk-secret",
    "AWS_SESSION_TOKEN": "st-secret",
    "XBP_DB_PASSWORD": "db-secret",
}


def test_a_child_sees_none_of_the_workers_secrets_only_what_it_needs(monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TMPDIR", "/var/tmp")
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    proc = children.run(
        [sys.executable, "-c", "import os, json; print(json.dumps(dict(os.environ)))"],
        capture_output=True,
        text=True,
        extra_env={"TZ": "UTC"},
    )
    seen = json.loads(proc.stdout)
    assert not set(SECRETS) & set(seen), seen
    assert not [v for v in seen.values() if "secret" in v]
    assert seen["TMPDIR"] == "/var/tmp" and seen["TZ"] == "UTC" and seen["LC_ALL"] == children.LOCALE
    assert "PATH" in seen and "LANG" not in seen
    assert set(seen) <= {*children.PASSED, "LC_ALL"}
