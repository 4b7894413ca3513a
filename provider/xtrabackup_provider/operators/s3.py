"""S3 operators: bucket lifecycle rules, Glacier restore requests, integrity checks, and the
encrypt + upload path for files made outside the streaming backup (binlogs, a user's own tools)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from ._common import host_catalog


class BackupVerifyFailed(RuntimeError):
    """At least one backup failed verification; the message lists every problem found."""


class BucketLifecycleOperator(BaseOperator):
    """Install (or with check_only, just check) lifecycle rules on a bucket. Idempotent.

    `rules`: [{"id": "xbp-main", "prefix": "backups/main/", "transitions": [{"days": 30,
    "storage_class": "GLACIER_IR"}, {"days": 180, "storage_class": "DEEP_ARCHIVE"}],
    "abort_incomplete_multipart_days": 7}]. Transitions apply to backup data objects only
    (tagged xbp-archive=true), never to manifests. The bucket's other rules are kept as they are.
    """

    template_fields: Sequence[str] = ("bucket",)
    ui_color = "#fcf3cf"

    def __init__(
        self,
        *,
        bucket: str,
        rules: list[dict[str, Any]],
        aws_conn_id: str = "aws_default",
        check_only: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.bucket = bucket
        self.rules = rules
        self.aws_conn_id = aws_conn_id
        self.check_only = check_only

    def execute(self, context: Any) -> dict[str, Any]:
        from ..core.storage import lifecycle
        from ..core.storage.s3 import S3Store
        from ..hooks.storage import BackupStorageHook

        lifecycle.parse_specs(self.rules)  # a bad spec fails before any S3 call
        store = BackupStorageHook(self.aws_conn_id, bucket=self.bucket).get_store()
        assert isinstance(store, S3Store)  # a bucket was given
        client = store.client
        if self.check_only:
            if problems := lifecycle.check(client, self.bucket, self.rules):
                raise lifecycle.LifecycleError("; ".join(problems))
            return {"bucket": self.bucket, "written": False, "problems": []}
        result = lifecycle.install(client, self.bucket, self.rules)
        self.log.info(
            "bucket %s: added %s, updated %s, unchanged %s, kept %s",
            self.bucket,
            result.added,
            result.updated,
            result.unchanged,
            result.kept,
        )
        return asdict(result)


class GlacierRestoreRequestOperator(BaseOperator):
    """Request the restore of every archived object of a backup's chain (`tier` Standard, Bulk or
    Expedited; readable for `days`). Objects already readable or being restored are left alone.
    XCom: {"requested": n, "states": [...]}; wait with GlacierRestoreSensor."""

    template_fields: Sequence[str] = ("cluster", "host", "backup_id", "tier", "bucket", "prefix")

    def __init__(
        self,
        *,
        cluster: str,
        host: str,
        bucket: str,
        backup_id: str | None = "latest",
        tier: str = "Standard",
        days: int = 3,
        prefix: str = "backups",
        aws_conn_id: str = "aws_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.cluster = cluster
        self.host = host
        self.bucket = bucket
        self.backup_id = backup_id
        self.tier = tier
        self.days = days
        self.prefix = prefix
        self.aws_conn_id = aws_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        from ..core.restore.archived import chain_states
        from ..core.storage.glacier import request_restores
        from ..hooks.storage import BackupStorageHook

        catalog = BackupStorageHook(self.aws_conn_id, bucket=self.bucket).get_catalog(
            self.prefix, self.cluster, self.host
        )
        before = chain_states(catalog, None if self.backup_id in (None, "", "latest") else self.backup_id)
        after = request_restores(catalog.store, before, self.tier, int(self.days))
        requested = sum(1 for s in before if s.state == "archived")
        self.log.info("requested %d restore(s) (%s tier): %s", requested, self.tier, [s.row() for s in after])
        return {"requested": requested, "states": [s.row() for s in after]}


class VerifyBackupOperator(BaseOperator):
    """Verify stored backups without restoring them; fails if any backup has a problem.

    mode quick: every object exists with the manifest's size, a known storage class, and the
    SSE / Object Lock recorded. mode deep: also stream every object (sha256, gpg, zstd, xbstream
    framing) to nowhere; encrypted backups need the private key (`gpg_conn_id`).
    `backup_id`: "all" (default), "latest" or an id. XCom: one small report per backup.
    """

    template_fields: Sequence[str] = ("cluster", "host", "backup_id", "mode", "bucket", "prefix")

    def __init__(
        self,
        *,
        cluster: str,
        host: str,
        backup_id: str = "all",
        mode: str = "quick",
        bucket: str | None = None,
        local_path: str | None = None,
        prefix: str = "backups",
        aws_conn_id: str = "aws_default",
        gpg_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.cluster = cluster
        self.host = host
        self.backup_id = backup_id
        self.mode = mode
        self.bucket = bucket
        self.local_path = local_path
        self.prefix = prefix
        self.aws_conn_id = aws_conn_id
        self.gpg_conn_id = gpg_conn_id

    def execute(self, context: Any) -> list[dict[str, Any]]:
        from ..core.restore.verify import VerifyRequest, verify
        from ..hooks.gpg import GpgKeysHook

        if self.mode not in ("quick", "deep"):
            raise ValueError(f"mode must be quick or deep, not {self.mode!r}")
        catalog = host_catalog(self)
        key, passphrase = (None, None)
        if self.mode == "deep" and self.gpg_conn_id:
            key, passphrase = GpgKeysHook(self.gpg_conn_id).private_key()
        ids = None if self.backup_id == "all" else [self.backup_id]
        if self.backup_id == "latest":
            ids = catalog.backup_ids()[-1:]
        reports = verify(VerifyRequest(catalog, ids, self.mode, key, passphrase))  # type: ignore[arg-type]
        bad = [r for r in reports if not r.ok]
        if bad:
            raise BackupVerifyFailed(
                f"{len(bad)} of {len(reports)} backup(s) of {self.cluster}/{self.host} failed {self.mode} verify: "
                + " | ".join(f"{r.backup_id}: {'; '.join(r.problems)}" for r in bad)
            )
        return [{k: v for k, v in r.as_dict().items() if k != "objects"} for r in reports]


class GpgEncryptOperator(BaseOperator):
    """Encrypt a file for the public keys of a `gpg_keys` connection: `source_path` -> `output_path`
    (default `<source_path>.gpg`). The source is kept unless remove_source=True.
    XCom: {"path", "size", "sha256", "recipients"}."""

    template_fields: Sequence[str] = ("source_path", "output_path")

    def __init__(
        self,
        *,
        source_path: str,
        output_path: str | None = None,
        gpg_conn_id: str = "backup_gpg",
        remove_source: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source_path = source_path
        self.output_path = output_path
        self.gpg_conn_id = gpg_conn_id
        self.remove_source = remove_source

    def execute(self, context: Any) -> dict[str, Any]:
        from ..core.backup.files import encrypt_file
        from ..hooks.gpg import GpgKeysHook

        source = Path(self.source_path)
        output = Path(self.output_path) if self.output_path else source.with_name(source.name + ".gpg")
        result = encrypt_file(source, output, GpgKeysHook(self.gpg_conn_id).public_keys())
        if self.remove_source:
            source.unlink()
        return asdict(result)


class BackupUploadOperator(BaseOperator):
    """Upload a file or a directory to `<dest_prefix>/` with the storage class, SSE and Object Lock
    given, multipart for large files, and a sha256 manifest (`<dest_prefix>/manifest.json`)
    written last. XCom: {"dest_prefix", "objects", "stored_bytes"}."""

    template_fields: Sequence[str] = ("source_path", "dest_prefix", "bucket", "storage_class")

    def __init__(
        self,
        *,
        source_path: str,
        dest_prefix: str,
        bucket: str | None = None,
        local_path: str | None = None,
        aws_conn_id: str = "aws_default",
        storage_class: str = "STANDARD",
        sse: str | None = None,
        kms_key_id: str | None = None,
        object_lock_mode: str | None = None,
        object_lock_days: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source_path = source_path
        self.dest_prefix = dest_prefix
        self.bucket = bucket
        self.local_path = local_path
        self.aws_conn_id = aws_conn_id
        self.storage_class = storage_class
        self.sse = sse
        self.kms_key_id = kms_key_id
        self.object_lock_mode = object_lock_mode
        self.object_lock_days = object_lock_days

    def execute(self, context: Any) -> dict[str, Any]:
        from ..core.backup.files import UploadRequest, upload
        from ..core.storage.base import ARCHIVE_TAGGING, STORAGE_CLASSES, PutOptions
        from ..hooks.storage import BackupStorageHook

        if self.storage_class not in STORAGE_CLASSES:
            raise ValueError(f"storage_class {self.storage_class!r} is not one of {sorted(STORAGE_CLASSES)}")
        if self.object_lock_mode not in (None, "GOVERNANCE", "COMPLIANCE"):
            raise ValueError(
                f"object_lock_mode must be GOVERNANCE or COMPLIANCE, not {self.object_lock_mode!r}"
            )
        options = PutOptions(
            self.storage_class,
            self.sse,
            self.kms_key_id,
            lock_mode=self.object_lock_mode,
            tagging=ARCHIVE_TAGGING,
        )
        store = BackupStorageHook(self.aws_conn_id, self.bucket, self.local_path).get_store()
        manifest = upload(
            UploadRequest(store, Path(self.source_path), self.dest_prefix, options, self.object_lock_days)
        )
        return {
            "dest_prefix": self.dest_prefix.strip("/"),
            "objects": [o.key for o in manifest.objects][:100],
            "stored_bytes": manifest.stored_bytes,
        }
