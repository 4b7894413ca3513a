"""Values a user gave that reach core/pitr/moments.py's errors are shown quoted (repr), as the
CLI's refusals quote them (cli/options.py): a blank, a newline or a stray quote stays visible."""

from __future__ import annotations

import pytest

from xtrabackup_provider.core.catalog.backups import Catalog
from xtrabackup_provider.core.pitr.moments import MomentsRequest, choose_server, list_moments
from xtrabackup_provider.core.pitr.plan import PitrError
from xtrabackup_provider.core.storage.local import LocalStore


def _catalog(tmp_path) -> Catalog:
    return Catalog(LocalStore(tmp_path / "store"), "backups", "c1", "db1")


@pytest.mark.parametrize("uuid", ["0e1f 2a3b", "abc\n", "'x'"])
def test_a_server_uuid_that_ships_nothing_is_quoted(tmp_path, uuid):
    with pytest.raises(PitrError) as err:
        choose_server(_catalog(tmp_path), uuid, None)
    assert f"holds no binlogs of server {uuid!r};" in str(err.value), str(err.value)


def test_a_backup_id_without_a_manifest_is_quoted(tmp_path):
    req = MomentsRequest(_catalog(tmp_path), backup_id="20260101T000000Z-full ")
    with pytest.raises(PitrError) as err:
        list(list_moments(req))
    assert "backup '20260101T000000Z-full ' has no readable manifest" in str(err.value), str(err.value)
