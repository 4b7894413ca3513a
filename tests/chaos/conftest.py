"""Fixtures of the crash-point suite: a bed per test (tests/chaos/crashbed.py) on the module's
seeded server (tests/conftest.py) and the session's moto endpoint."""

from __future__ import annotations

import secrets

import pytest
from crashbed import Bed


@pytest.fixture
def bed(seeded, s3_server, gpg_keys, tmp_path) -> Bed:
    server, db = seeded
    suffix = secrets.token_hex(5)
    return Bed(
        server, db, s3_server, gpg_keys, tmp_path,
        s3_server.make_bucket(f"xbp-crash-{suffix}"), s3_server.make_bucket(f"xbp-far-{suffix}"),
    )  # fmt: skip
