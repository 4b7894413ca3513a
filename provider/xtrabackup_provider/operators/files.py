"""Files made outside the streaming backup (binlogs, a user's own tools): GpgEncryptOperator
encrypts a file for the backup recipients, BackupUploadOperator uploads a file or a directory
with a sha256 manifest written last."""

from __future__ import annotations

__all__ = ["BackupUploadOperator", "GpgEncryptOperator"]

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from ..arguments import KeptArguments, keep_arguments


class GpgEncryptOperator(KeptArguments, BaseOperator):
    """Encrypt a file for the public keys of a `gpgkeys` connection: `source_path` -> `output_path`
    (default `<source_path>.gpg`). The source is kept unless remove_source=True.
    XCom: {"path", "size", "sha256", "recipients"}."""

    template_fields: Sequence[str] = ("source_path", "output_path", "gpg_conn_id")

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
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from ..core.backup.files import encrypt_file
        from ..hooks.gpg import GpgKeysHook

        source = Path(self.source_path)
        output = Path(self.output_path) if self.output_path else source.with_name(source.name + ".gpg")
        result = encrypt_file(source, output, GpgKeysHook(self.gpg_conn_id).public_keys())
        if self.remove_source:
            source.unlink()
        return asdict(result)


class BackupUploadOperator(KeptArguments, BaseOperator):
    """Upload a file or a directory to `<dest_prefix>/` with the storage class, SSE and Object Lock
    given, multipart for large files, and a sha256 manifest (`<dest_prefix>/manifest.json`)
    written last. XCom: {"dest_prefix", "objects", "stored_bytes"}."""

    template_fields: Sequence[str] = (
        "source_path",
        "dest_prefix",
        "bucket",
        "local_path",
        "aws_conn_id",
        "storage_class",
    )

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
        keep_arguments(self, locals())

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
