"""What a manifest records besides its data objects: how gently the backup ran and what it cost
production (`impact`: the bounds it ran under, the locks the tool held), and, on a further storage
target, where the copy came from (`copy_of`). Every field is optional, so the manifests written
before these records existed still read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# What production cannot do while a backup lock is held (or requested: a pending lock queues
# everything behind it).
Blocked = Literal["commits", "ddl", "non_transactional_writes"]
BLOCKED: tuple[Blocked, ...] = ("commits", "ddl", "non_transactional_writes")


class LockPhase(BaseModel):
    """One lock the backup tool took, from its own log: MariaDB's BACKUP STAGE steps, XtraBackup's
    LOCK INSTANCE / LOCK TABLES FOR BACKUP / FLUSH TABLES WITH READ LOCK / LOCK BINLOG."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=64)  # "BACKUP STAGE BLOCK_COMMIT", "FLUSH TABLES WITH READ LOCK"
    blocks: list[Blocked] = Field(default_factory=list, max_length=3)
    started_at: datetime | None = None  # when the tool asked for it
    waited_seconds: float = Field(0.0, ge=0)  # until it was granted
    held_seconds: float = Field(0.0, ge=0)  # from then until the tool released it


class BackupImpact(BaseModel):
    """The bounds a backup ran under (core/backup/impact.py) and what it cost production."""

    model_config = ConfigDict(extra="forbid")

    throttle: int | None = None  # the tool's --throttle, as passed
    parallel: int | None = None  # the tool's --parallel
    nice: int | None = None  # niceness of the tool, gpg and the zstd threads
    ionice: str | None = None  # "idle" or "best-effort:<level>", of the tool
    max_upload_bytes_per_second: int | None = None  # the cap on the upload to the first target
    upload_wait_seconds: float = Field(0.0, ge=0)  # how long that cap held the upload back
    locks: list[LockPhase] = Field(default_factory=list, max_length=64)
    # Seconds during which production could not do each of these (union of the phases that block it).
    blocked_seconds: dict[Blocked, float] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list, max_length=32)  # a bound that could not be applied


class CopyOrigin(BaseModel):
    """On a further storage target: the target this manifest's backup was copied from."""

    model_config = ConfigDict(extra="forbid")

    target: str = Field(max_length=128)  # its name in the fleet config
    location: str = Field(max_length=1024)  # s3://bucket or file:///dir
    copied_at: datetime
