"""What the source looked like when a backup was taken, as the manifest records it: every table
with its engine, row estimate and sizes, and the GTID position the server reported before and
after the backup. Recorded from information_schema (core.db.shape), never with COUNT(*) on the
source; a restore test compares the restored copy with it (core.restore.evidence).

Older manifests have no `source_shape`; they stay readable and their restore tests say so.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

MAX_SHAPE_TABLES = 20_000  # about 120 bytes each: a manifest stays well under its 4 MiB limit


class TableShape(BaseModel):
    """One base table: information_schema.TABLES as the server reported it. For InnoDB, `rows` is
    the estimate of its last statistics, moved by every insert and delete since (n_rows)."""

    model_config = ConfigDict(extra="forbid")

    schema_name: str = Field(max_length=256)
    table: str = Field(max_length=256)
    engine: str = Field(max_length=64)
    rows: int = Field(ge=0)  # TABLE_ROWS: exact for Aria/MyISAM, an estimate for InnoDB
    data_bytes: int = Field(ge=0)
    index_bytes: int = Field(ge=0)

    @property
    def name(self) -> str:
        return f"{self.schema_name}.{self.table}"


class SourceShape(BaseModel):
    """The source's tables at the end of the backup and its GTID position around it."""

    model_config = ConfigDict(extra="forbid")

    captured_at: datetime
    gtid_before: str = ""  # what the server reported right before the backup started
    gtid_after: str = ""  # ... and right after it finished
    tables: list[TableShape] = Field(default_factory=list, max_length=MAX_SHAPE_TABLES)
    # Tables created or dropped while the backup ran: the backup may or may not hold them.
    changed_during_backup: list[str] = Field(default_factory=list, max_length=MAX_SHAPE_TABLES)
    truncated: bool = False  # the server had more than MAX_SHAPE_TABLES tables: the first ones are listed
    # InnoDB tables whose persistent statistics are older than the server's last start: their
    # `rows` is what was persisted then, which may predate a bulk load or a mass DELETE, so their
    # estimates are not compared. None: not known (older manifests, no SELECT on mysql.*).
    stale_statistics: list[str] | None = Field(None, max_length=MAX_SHAPE_TABLES)
