"""BucketLifecycleOperator: the bucket's lifecycle rules for colder tiers and abandoned uploads."""

from __future__ import annotations

__all__ = ["BucketLifecycleOperator"]

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from airflow.sdk import BaseOperator

from ..arguments import KeptArguments, keep_arguments


class BucketLifecycleOperator(KeptArguments, BaseOperator):
    """Install (or with check_only, just check) lifecycle rules on a bucket. Idempotent.

    `rules`: [{"id": "xbp-main", "prefix": "backups/main/", "transitions": [{"days": 30,
    "storage_class": "GLACIER_IR"}, {"days": 180, "storage_class": "DEEP_ARCHIVE"}],
    "abort_incomplete_multipart_days": 7, "noncurrent_version_days": 7}]. Transitions apply to
    backup data objects only (tagged xbp-archive=true), never to manifests. On a versioned bucket,
    `noncurrent_version_days` expires non-current versions and lone delete markers under the
    prefix. The bucket's other rules are kept as they are.
    """

    template_fields: Sequence[str] = ("bucket", "aws_conn_id")
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
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from ..core.storage import lifecycle
        from ..hooks.storage import BackupStorageHook

        lifecycle.parse_specs(self.rules)  # a bad spec fails before any S3 call
        client = BackupStorageHook(self.aws_conn_id, bucket=self.bucket).get_s3_store().client
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
