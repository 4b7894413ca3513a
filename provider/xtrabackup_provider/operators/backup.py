"""XtraBackupOperator: one streamed backup (full, incremental or policy-chosen) of one host."""

from __future__ import annotations

__all__ = ["XtraBackupOperator", "BACKUP_LABEL", "KIND_FROM_RUN_CONF"]

import logging
from collections.abc import Sequence
from typing import Any

from ..arguments import keep_arguments
from . import _metrics
from .base import (
    PUBLIC_KEYS_CONN,
    BackupStorageOperator,
    skip_unless_branch_chose,
    storage_template_fields,
    task_origin,
)

log = logging.getLogger(__name__)

KINDS = ("auto", "full", "incremental")
# A map index label that names the host and, once the backup ran, the kind it took:
# `db1` while it runs, `db1 (incremental)` after. Airflow renders map_index_template before
# execute and again after it with the same context, where execute puts `backup_kind`
# (3.1 renders only after execute: no label while it runs, the same one after).
BACKUP_LABEL = "{{ task.host }}{% if backup_kind is defined %} ({{ backup_kind }}){% endif %}"
# The run conf's {"kind": ...}, else the policy: for `kind` in a DAG.
KIND_FROM_RUN_CONF = "{{ (dag_run.conf or {}).get('kind', 'auto') }}"


class XtraBackupOperator(BackupStorageOperator):
    """Stream `xtrabackup`/`mariabackup` -> zstd -> gpg -> S3 and register the manifest.

    Runs on a worker on the database host (set `queue`; in the shipped DAG's mapped task group,
    xtrabackup_provider.policy routes it to its host's queue). `kind` is "auto" (the chain policy
    decides, under the host lock, on the host), "full" or "incremental"; templated, so a DAG can
    take it from the run conf (`KIND_FROM_RUN_CONF`). Returns small metadata for XCom: ids, keys,
    sizes, LSNs, the kind and why. With `map_index_template=BACKUP_LABEL` a mapped backup is
    labelled `<host> (<kind>)` once it ran.

    Before a byte is streamed the server reached must be the host's (its server_uuid known to the
    catalog, its @@datadir the configured `datadir`); the identity checked is in the manifest
    (`extra.server_identity`) and the XCom (`server`). `accept_new_server=True` takes a rebuilt
    server as the host's (core/binlog/identity.py).
    """

    # The per-host arguments are templated so that a mapped task group can pass them.
    template_fields: Sequence[str] = storage_template_fields(
        "mysql_conn_id", "kind", "flavour", "binary", "datadir", "heartbeat_conn_id", "impact", "option_files"
    )
    ui_color = "#d6eaf8"
    gpg_conn_default = PUBLIC_KEYS_CONN

    def __init__(
        self,
        *,
        mysql_conn_id: str,
        kind: str = "auto",
        flavour: str = "mariabackup",
        binary: str | None = None,
        datadir: str | None = None,
        compression_level: int = 3,
        zstd_threads: int = 0,
        parallel: int = 2,
        max_parts: int = 1,
        part_min_gib: float = 8,
        storage_classes: dict[str, str] | None = None,
        sse: str | None = None,
        kms_key_id: str | None = None,
        object_lock_mode: str | None = None,
        object_lock_days: int | None = None,
        full_every_days: float = 7,
        max_chain_length: int = 6,
        max_incremental_ratio: float = 0.5,
        heartbeat: bool = False,
        heartbeat_conn_id: str | None = None,
        gates_from: list[str] | None = None,
        impact: dict[str, Any] | None = None,
        option_files: list[str] | None = None,
        accept_new_server: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())
        self.storage_classes = storage_classes or {"full": "STANDARD", "incremental": "STANDARD"}
        self.gates_from = gates_from or []  # gate task ids whose XCom (GateResult dicts) goes in the manifest

    def execute(self, context: Any) -> dict[str, Any]:
        from datetime import timedelta

        from airflow.providers.common.compat.sdk import AirflowFailException

        from ..core.backup.decide import ChainPolicy
        from ..core.backup.impact import ImpactSettings
        from ..core.backup.run import BackupRequest, run_backup
        from ..core.catalog.manifest import GateResult
        from ..core.common.progress import ProgressLogger
        from ..core.engine.tools import FLAVOURS
        from ..hooks.xtrabackup import XtraBackupHook

        skip_unless_branch_chose(self, context)  # downstream of a branch of your own (EXTENDING)
        if self.kind not in KINDS:
            # Bad input (a run conf's "kind", say): a retry would not change it.
            raise AirflowFailException(
                f"backup of {self.cluster}/{self.host}: kind must be auto, full or incremental, not {self.kind!r}"
            )
        if self.flavour not in FLAVOURS:
            raise AirflowFailException(
                f"backup of {self.cluster}/{self.host}: flavour must be one of {', '.join(FLAVOURS)}, "
                f"not {self.flavour!r}"
            )
        catalog = self.catalog()
        request = BackupRequest(
            catalog=catalog,
            target=XtraBackupHook(self.mysql_conn_id).get_target(),
            flavour=self.flavour,
            binary=self.binary,
            datadir=self.datadir,
            kind=self.kind,
            **self.encryption(),
            compression_level=self.compression_level,
            zstd_threads=self.zstd_threads,
            parallel=self.parallel,
            max_parts=self.max_parts,
            part_min_bytes=int(self.part_min_gib * (1 << 30)),
            storage_classes=self.storage_classes,
            sse=self.sse,
            kms_key_id=self.kms_key_id,
            object_lock_mode=self.object_lock_mode,
            object_lock_days=self.object_lock_days,
            policy=ChainPolicy(
                timedelta(days=self.full_every_days), self.max_chain_length, self.max_incremental_ratio
            ),
            heartbeat=self.heartbeat,
            heartbeat_target=XtraBackupHook(self.heartbeat_conn_id).get_target()
            if self.heartbeat_conn_id
            else None,
            progress=ProgressLogger(log, f"backup of {self.cluster}/{self.host}"),
            gates=[
                GateResult.model_validate(gate)
                for task_id in self.gates_from
                for gate in context["ti"].xcom_pull(task_ids=task_id) or []
            ],
            impact=ImpactSettings.from_dict(self.impact),
            option_files=list(self.option_files or []),
            accept_new_server=self.accept_new_server,
            origin=task_origin(context),
        )
        try:
            manifest = run_backup(request)
        except Exception:
            _metrics.emit("backup", self.cluster, self.host, counters=("failed",))
            raise
        _metrics.backup_done(self.cluster, self.host, manifest)
        context["backup_kind"] = manifest.kind  # for BACKUP_LABEL, rendered again after execute
        return {
            "backup_id": manifest.backup_id,
            "kind": manifest.kind,
            "parent_id": manifest.parent_id,
            "chain_root": manifest.chain_root,
            "decision_reason": manifest.decision_reason,
            "object_key": manifest.backup_object.key,  # part 0 of a K-part backup
            "object_keys": [o.key for o in manifest.objects],
            "manifest_key": catalog.manifest_key(manifest.backup_id),
            "raw_bytes": manifest.raw_bytes,
            "stored_bytes": manifest.stored_bytes,
            "from_lsn": manifest.from_lsn,
            "to_lsn": manifest.to_lsn,
            "gtid": manifest.gtid,
            "blocked_seconds": dict(manifest.impact.blocked_seconds) if manifest.impact else {},
            "impact_warnings": manifest.impact.warnings if manifest.impact else [],
            "server": manifest.extra.get("server_identity"),
        }
