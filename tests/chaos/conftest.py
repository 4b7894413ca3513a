"""Fixtures of the crash-point suite: one seeded MariaDB server per module and a bed per test
(tests/chaos/crashbed.py) on the session's moto endpoint."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from crashbed import Bed

from helpers import seed_database, unique_name
from xtrabackup_provider.core.db.sandbox import SandboxServer


@pytest.fixture(scope="module")
def seeded(mariadb_factory) -> Iterator[tuple[SandboxServer, str]]:
    server = mariadb_factory("crash", root_password=secrets.token_urlsafe(16))
    db = unique_name("crash")
    seed_database(server, db, rows=3000)
    try:
        yield server, db
    finally:
        mariadb_factory.discard(server)


@pytest.fixture
def bed(seeded, s3_server, gpg_keys, tmp_path) -> Bed:
    server, db = seeded
    suffix = secrets.token_hex(5)
    return Bed(
        server, db, s3_server, gpg_keys, tmp_path,
        s3_server.make_bucket(f"xbp-crash-{suffix}"), s3_server.make_bucket(f"xbp-far-{suffix}"),
    )  # fmt: skip
