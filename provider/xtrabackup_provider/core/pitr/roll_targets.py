"""Which storage target the restore test's roll-forward reads the shipped binlogs from, for MariaDB's
backups (core/pitr/roll_forward.py) and MySQL's (core/pitr/mysql_roll_forward.py) alike: the first
whose binlogs can roll the backup forward (core/catalog/targets.py; each binlog is then fetched
from the first target holding it intact, and the notes say which copy was read); and the read lease
that keeps those binlogs from retention while they are fetched and replayed (roll_lease)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from ..binlog.catalog import BinlogError, BinlogManifest
from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..catalog.targets import READ_ERRORS, Targets
from ..restore.evidence import CheckResult
from ..storage.base import StorageError
from .recover import binlog_read_lease

T = TypeVar("T")

PURPOSE = "restore test's roll-forward"


class NotRolled(Exception):
    """This target's binlogs cannot roll the backup forward: the check's result says why."""

    def __init__(self, result: CheckResult) -> None:
        super().__init__("; ".join(result.reasons) or result.note)
        self.result = result


def first_rolling(targets: Targets, manifest: Manifest, on: Callable[[Catalog, Manifest], T]) -> T:
    """`on(catalog, manifest)` on the first target where it succeeds. When none does and those that
    could be read said why their binlogs cannot roll the backup forward (NotRolled), the first of
    those answers is raised (a target that is down knows nothing better)."""
    answers: list[NotRolled] = []

    def each(catalog: Catalog) -> T:
        try:
            return on(catalog, manifest)
        except NotRolled as exc:
            answers.append(exc)
            raise

    try:
        return targets.read("the shipped binlogs", each, errors=(*READ_ERRORS, BinlogError, NotRolled))
    except StorageError:
        if answers:
            raise answers[0] from None
        raise


@contextmanager
def roll_lease(targets: Targets, chain: list[BinlogManifest], unleased_ok: bool = False) -> Iterator[None]:
    """Retention keeps the binlogs of `chain` (planned on `targets.first`, see first_rolling) from
    before their fetch to the end of the replay (core/catalog/lease.py): the chain restore's lease
    ended with the restore, and a binlog deleted under the roll-forward would fail the restore
    test on a missing object. One deleted before the lease was written: CatalogError naming it,
    before anything is fetched."""
    names = [f"{m.server_uuid}/{m.name}" for m in chain]
    with binlog_read_lease(targets.first.catalog, PURPOSE, [], names, unleased_ok) as lease:
        lease.check()
        yield
