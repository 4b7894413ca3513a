"""Which storage target the restore test's roll-forward reads the shipped binlogs from, for MariaDB's
backups (core/pitr/roll_forward.py) and MySQL's (core/pitr/mysql_roll_forward.py) alike: the first
whose binlogs can roll the backup forward (core/catalog/targets.py; each binlog is then fetched
from the first target holding it intact, and the notes say which copy was read)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..binlog.catalog import BinlogError
from ..catalog.backups import Catalog
from ..catalog.manifest import Manifest
from ..catalog.targets import READ_ERRORS, Targets
from ..restore.evidence import CheckResult
from ..storage.base import StorageError

T = TypeVar("T")


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
