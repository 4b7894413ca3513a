"""S3Store: multipart upload with bounded memory, storage class, SSE, Object Lock, ranged
parallel GET, and botocore errors turned into one line naming the endpoint, bucket and key.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .base import (
    LEGAL_HOLD,
    Deleted,
    LockReader,
    MiB,
    ObjectInfo,
    PutOptions,
    StorageError,
    Versioned,
    check_key,
    choose_part_size,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

_CREDENTIAL_CODES = frozenset(
    {
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "AuthorizationHeaderMalformed",
        "InvalidClientTokenId",
    }
)


def s3_hint(exc: BaseException, bucket: str, endpoint: str | None) -> str | None:
    """What to check after a botocore error, naming the endpoint and bucket; None if `exc` is
    not one whose cause we can name (or not a botocore error at all)."""
    if not type(exc).__module__.startswith("botocore"):
        return None
    from botocore.exceptions import (
        ClientError,
        ConnectionError,
        CredentialRetrievalError,
        HTTPClientError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    where = f"bucket {bucket!r} at {endpoint or 'the default AWS S3 endpoint'}"
    if isinstance(exc, ConnectionError | HTTPClientError):
        return (
            f"Cannot reach the S3 endpoint of {where}: check the endpoint URL (storage.endpoint_url or "
            "--endpoint-url) and that the endpoint is up and reachable from this machine"
        )
    if isinstance(exc, NoCredentialsError | PartialCredentialsError | CredentialRetrievalError):
        return (
            f"No usable S3 credentials for {where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "or AWS_PROFILE, or give this machine an instance role"
        )
    if not isinstance(exc, ClientError):
        return None
    code = str(exc.response.get("Error", {}).get("Code", ""))
    if code == "NoSuchBucket":
        return (
            f"There is no {where}: check the bucket name (storage.bucket or --bucket) and the endpoint "
            "URL (storage.endpoint_url or --endpoint-url)"
        )
    if code in _CREDENTIAL_CODES:
        return (
            f"The S3 endpoint rejected the credentials for {where}: check AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) and storage.region"
        )
    if code in ("AccessDenied", "403", "Forbidden", "AllAccessDisabled"):
        return (
            f"Access to {where} was denied: check the credentials and that their policy allows this "
            "operation on the bucket"
        )
    return None


def make_s3_client(
    endpoint_url: str | None = None, region: str | None = None, max_attempts: int = 8, **kwargs: Any
) -> S3Client:
    """A boto3 S3 client that retries 5xx, throttling and connection resets with backoff."""
    import boto3
    from botocore.config import Config

    config = Config(retries={"max_attempts": max_attempts, "mode": "standard"}, max_pool_connections=16)
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=region, config=config, **kwargs)


@dataclass
class S3Store:
    client: Any
    bucket: str
    max_inflight_parts: int = 4
    read_chunk: int = 8 * MiB
    read_parallel: int = 4
    location: str = field(init=False)
    _versioning: bool | None = field(default=None, init=False, repr=False)

    supports_object_lock = True
    supports_archive = True

    def __post_init__(self) -> None:
        self.location = f"s3://{self.bucket}"

    @property
    def endpoint_url(self) -> str | None:
        meta = getattr(self.client, "meta", None)
        return getattr(meta, "endpoint_url", None)

    def failure(self, what: str, key: str, exc: BaseException) -> StorageError:
        """The StorageError for a botocore error of `what` on `key`, with what to check when the
        cause is the endpoint, the bucket or the credentials (one line: the CLI prints it)."""
        hint = s3_hint(exc, self.bucket, self.endpoint_url)
        return StorageError(f"{self.location}/{key}: {what} failed: {exc}" + (f". {hint}" if hint else ""))

    def open_writer(self, key: str, options: PutOptions | None = None) -> _S3MultipartWriter:
        return _S3MultipartWriter(self, check_key(key), options or PutOptions())

    def put_bytes(self, key: str, data: bytes, options: PutOptions | None = None) -> None:
        options = options or PutOptions()
        self._call(
            "put",
            key,
            self.client.put_object,
            Bucket=self.bucket,
            Key=check_key(key),
            Body=data,
            **options.s3_args(),
        )
        self.ensure_retention(key, options)

    def get_bytes(self, key: str) -> bytes:
        resp = self._call("get", key, self.client.get_object, Bucket=self.bucket, Key=check_key(key))
        return bytes(resp["Body"].read())

    def read_chunks(self, key: str) -> Iterator[bytes]:
        """Ordered chunks from parallel ranged GETs; at most `read_parallel` chunks in memory."""
        info = self.head(key)
        if info is None:
            raise StorageError(f"{self.location}: no object {key!r}")
        ranges = [
            (start, min(start + self.read_chunk, info.size) - 1)
            for start in range(0, info.size, self.read_chunk)
        ]
        with ThreadPoolExecutor(self.read_parallel, thread_name_prefix="s3get") as pool:
            pending: deque[Future[bytes]] = deque()
            for start, end in ranges:
                pending.append(pool.submit(self._get_range, key, start, end))
                if len(pending) >= self.read_parallel:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()

    def _get_range(self, key: str, start: int, end: int) -> bytes:
        resp = self._call(
            "get", key, self.client.get_object, Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end}"
        )
        return bytes(resp["Body"].read())

    def _head(self, key: str) -> dict[str, Any] | None:
        """HEAD's response, or None when there is no such object."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return dict(self.client.head_object(Bucket=self.bucket, Key=check_key(key)))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self.failure("head", key, exc) from exc
        except BotoCoreError as exc:
            raise self.failure("head", key, exc) from exc

    def head(self, key: str) -> ObjectInfo | None:
        if (resp := self._head(key)) is None:
            return None
        return ObjectInfo(
            key,
            resp["ContentLength"],
            resp.get("StorageClass", "STANDARD"),
            resp.get("LastModified"),
            resp.get("Restore"),
            resp.get("ServerSideEncryption"),
            resp.get("SSEKMSKeyId"),
            resp.get("ObjectLockMode"),
            resp.get("ObjectLockRetainUntilDate"),
        )

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        for page in self._pages("list_objects_v2", "list", prefix):
            for obj in page.get("Contents", []):
                yield ObjectInfo(
                    obj["Key"], obj["Size"], obj.get("StorageClass", "STANDARD"), obj.get("LastModified")
                )

    def _pages(self, operation: str, what: str, prefix: str) -> Iterator[dict[str, Any]]:
        """The pages of a paginated listing under `prefix`; a failure names the endpoint and bucket."""
        from botocore.exceptions import BotoCoreError, ClientError

        pages = iter(self.client.get_paginator(operation).paginate(Bucket=self.bucket, Prefix=prefix))
        while True:
            try:
                page = next(pages, None)
            except (BotoCoreError, ClientError) as exc:
                raise self.failure(what, prefix, exc) from exc
            if page is None:
                return
            yield page

    def delete(self, keys: Iterable[str]) -> Deleted:
        """Delete `keys`. On a versioned bucket (Object Lock buckets always are) every version and
        delete marker of each key is deleted by VersionId, so the bytes are really freed; a
        version that Object Lock still retains is kept (the object stays visible) and named in
        the result. The caller's order holds per call: keys of one call are gone (or named as
        retained) before it returns."""
        checked = [check_key(k) for k in keys]
        if not checked:
            return Deleted()
        if not self._versioned():
            result = Deleted(freed_bytes=None)
            for start in range(0, len(checked), 1000):
                self._delete_batch([{"Key": k} for k in checked[start : start + 1000]], result)
            return result
        return self._delete_versions(checked)

    def _versioned(self) -> bool:
        """Is versioning on (Enabled or Suspended)? Asked once per store."""
        if self._versioning is None:
            resp = self._call(
                "read the versioning status", "", self.client.get_bucket_versioning, Bucket=self.bucket
            )
            self._versioning = resp.get("Status") in ("Enabled", "Suspended")
        return self._versioning

    def _delete_versions(self, keys: builtins.list[str]) -> Deleted:
        wanted = set(keys)
        versions: builtins.list[dict[str, Any]] = []
        markers: builtins.list[dict[str, Any]] = []
        sizes: dict[tuple[str, str], int] = {}
        for prefix in sorted({k.rsplit("/", 1)[0] + "/" if "/" in k else k for k in keys}):
            for page in self._pages("list_object_versions", "list versions", prefix):
                for v in page.get("Versions", []):
                    if v["Key"] in wanted:
                        versions.append({"Key": v["Key"], "VersionId": v["VersionId"]})
                        sizes[(v["Key"], v["VersionId"])] = int(v.get("Size", 0))
                for d in page.get("DeleteMarkers", []):
                    if d["Key"] in wanted:
                        markers.append({"Key": d["Key"], "VersionId": d["VersionId"]})
        result = Deleted()
        # Versions first, delete markers after: an interrupted run never uncovers a version.
        for batch in (versions, markers):
            for start in range(0, len(batch), 1000):
                self._delete_batch(batch[start : start + 1000], result, sizes)
        retained_keys = {r.split(" ", 1)[0] for r in result.retained}
        result.keys = len(wanted - retained_keys)
        return result

    def _delete_batch(
        self,
        objects: builtins.list[dict[str, Any]],
        result: Deleted,
        sizes: dict[tuple[str, str], int] | None = None,
    ) -> None:
        resp = self._call(
            "delete",
            objects[0]["Key"],
            self.client.delete_objects,
            Bucket=self.bucket,
            Delete={"Objects": objects},
        )
        for done in resp.get("Deleted", []):
            if sizes is None:
                result.keys += 1
            elif result.freed_bytes is not None:
                result.freed_bytes += sizes.get((done["Key"], done.get("VersionId", "")), 0)
        for error in resp.get("Errors", []):
            key, message = error.get("Key", ""), str(error.get("Message", ""))
            # Some implementations leave out the VersionId: name the ones this batch asked for.
            version = error.get("VersionId") or ", ".join(
                o["VersionId"] for o in objects if o["Key"] == key and "VersionId" in o
            )
            if version and error.get("Code") == "AccessDenied" and "lock" in message.lower():
                result.retained.append(f"{key} (version {version}): {message}")
                continue
            raise StorageError(f"{self.location}: could not delete {key}: {message}")
        if result.retained:
            log.warning("%s: kept under Object Lock: %s", self.location, "; ".join(result.retained[:5]))

    def put_new(self, key: str, data: bytes, if_match: str | None = None) -> str | None:
        """Conditional write: create `key` only if it is absent (if_match None), or replace it only
        while its ETag is still `if_match`. Returns the new ETag, or None if the condition failed."""
        from botocore.exceptions import BotoCoreError, ClientError

        condition = {"IfNoneMatch": "*"} if if_match is None else {"IfMatch": if_match}
        try:
            resp = self.client.put_object(Bucket=self.bucket, Key=check_key(key), Body=data, **condition)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "412", "409", "404"):
                return None
            raise self.failure("conditional put", key, exc) from exc
        except BotoCoreError as exc:
            raise self.failure("conditional put", key, exc) from exc
        return str(resp["ETag"])

    def get_versioned(self, key: str) -> Versioned | None:
        """The object, its ETag and its age by the store's clock (the response's Date header less
        the object's LastModified, both written by the store), or None if it does not exist."""
        try:
            resp = self._call("get", key, self.client.get_object, Bucket=self.bucket, Key=check_key(key))
        except StorageError as exc:
            if "no object" in str(exc):
                return None
            raise
        age = None
        date = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        modified = resp.get("LastModified")
        if date and isinstance(modified, datetime):
            from email.utils import parsedate_to_datetime

            with contextlib.suppress(TypeError, ValueError):
                age = max(timedelta(0), parsedate_to_datetime(date) - modified)
        return Versioned(bytes(resp["Body"].read()), str(resp["ETag"]), age)

    def open_multipart_uploads(self, prefix: str = "") -> builtins.list[str]:
        resp = self._call(
            "list multipart uploads",
            prefix,
            self.client.list_multipart_uploads,
            Bucket=self.bucket,
            Prefix=prefix,
        )
        return [u["Key"] for u in resp.get("Uploads", [])]

    def abort_stale_uploads(self, prefix: str, older_than: timedelta) -> builtins.list[str]:
        """Abort multipart uploads under `prefix` started more than `older_than` ago.

        They belong to runs that died or whose own abort could not reach the endpoint; the
        caller picks a prefix (one host's backups) and an age no live run of it can reach.
        """
        cutoff = datetime.now(UTC) - older_than
        aborted = []
        for page in self._pages("list_multipart_uploads", "list multipart uploads", prefix):
            for upload in page.get("Uploads", []):
                initiated = upload.get("Initiated")
                if initiated is not None and initiated > cutoff:
                    continue
                self._call(
                    "abort stale multipart upload",
                    upload["Key"],
                    self.client.abort_multipart_upload,
                    Bucket=self.bucket,
                    Key=upload["Key"],
                    UploadId=upload["UploadId"],
                )
                aborted.append(upload["Key"])
        if aborted:
            log.warning("%s: aborted %d stale multipart upload(s): %s", self.location, len(aborted), aborted)
        return aborted

    def restore_object(self, key: str, days: int, tier: str) -> bool:
        """Ask S3 to make an archived object readable for `days`; False if a restore is already running."""
        from botocore.exceptions import ClientError

        try:
            self.client.restore_object(
                Bucket=self.bucket,
                Key=check_key(key),
                RestoreRequest={"Days": days, "GlacierJobParameters": {"Tier": tier}},
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "RestoreAlreadyInProgress":
                return False
            raise self.failure(f"restore request ({tier})", key, exc) from exc
        return True

    def lock_reader(self) -> LockReader | None:
        """Keys -> retain-until (a legal hold is LEGAL_HOLD), or None when the bucket has no Object Lock."""
        if not self._bucket_has_object_lock():
            return None

        def read(keys: builtins.list[str]) -> dict[str, datetime]:
            with ThreadPoolExecutor(8) as pool:
                found = zip(keys, pool.map(self._retained_until, keys), strict=True)
                return {k: d for k, d in found if d}

        return read

    def _bucket_has_object_lock(self) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            resp = self.client.get_object_lock_configuration(Bucket=self.bucket)
        except BotoCoreError as exc:
            raise self.failure("read the Object Lock configuration", "", exc) from exc
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ObjectLockConfigurationNotFoundError":
                return False
            if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
                raise self.failure("read the Object Lock configuration", "", exc) from exc
            log.warning(
                "%s: cannot read the Object Lock configuration (%s); checking every object",
                self.location,
                exc,
            )
            return True
        return resp.get("ObjectLockConfiguration", {}).get("ObjectLockEnabled") == "Enabled"

    def _retained_until(self, key: str) -> datetime | None:
        if (resp := self._head(key)) is None:
            return None
        if resp.get("ObjectLockLegalHoldStatus") == "ON":
            return LEGAL_HOLD
        until = resp.get("ObjectLockRetainUntilDate")
        return until if isinstance(until, datetime) else None

    def ensure_retention(self, key: str, options: PutOptions) -> None:
        """Make sure the Object Lock retention asked for is on the stored object.

        Some S3 implementations drop the lock headers of CreateMultipartUpload; set it
        explicitly then, and refuse to go on (no manifest) if the object still is not locked.
        """
        if not (options.lock_mode and options.lock_until) or _locked(self.head(key), options):
            return
        self._call(
            "put Object Lock retention",
            key,
            self.client.put_object_retention,
            Bucket=self.bucket,
            Key=key,
            Retention={"Mode": options.lock_mode, "RetainUntilDate": options.lock_until},
        )
        if not _locked(self.head(key), options):
            raise StorageError(
                f"{self.location}/{key}: Object Lock {options.lock_mode} until {options.lock_until:%Y-%m-%d} "
                "did not stick; is Object Lock enabled on the bucket?"
            )

    def _call(self, what: str, key: str, fn: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404"):
                raise StorageError(f"{self.location}: no object {key!r}") from exc
            if code == "InvalidObjectState":
                raise StorageError(
                    f"{self.location}/{key} is archived (GLACIER/DEEP_ARCHIVE); request its restore first"
                ) from exc
            raise self.failure(what, key, exc) from exc
        except BotoCoreError as exc:
            raise self.failure(what, key, exc) from exc


def _locked(info: ObjectInfo | None, options: PutOptions) -> bool:
    if info is None or info.lock_until is None or options.lock_until is None:
        return False
    wanted = options.lock_until.replace(microsecond=0)  # S3 keeps retain-until at second precision
    return info.lock_mode == options.lock_mode and info.lock_until >= wanted


class _S3MultipartWriter:
    """Buffers one part, uploads up to `max_inflight_parts` concurrently: memory is bounded."""

    def __init__(self, store: S3Store, key: str, options: PutOptions) -> None:
        self.store, self.key, self.options = store, key, options
        self.part_size = choose_part_size(options.expected_size)
        self.upload_id: str | None = None
        self.buffer = bytearray()
        self.parts: dict[int, str] = {}
        self.futures: list[Future[None]] = []
        self.slots = threading.Semaphore(store.max_inflight_parts)
        self.pool = ThreadPoolExecutor(store.max_inflight_parts, thread_name_prefix="s3put")
        self.size = 0

    def _start(self) -> None:
        resp = self.store._call(
            "create multipart upload",
            self.key,
            self.store.client.create_multipart_upload,
            Bucket=self.store.bucket,
            Key=self.key,
            **self.options.s3_args(),
        )
        self.upload_id = resp["UploadId"]

    def write(self, data: bytes) -> None:
        self.buffer += data
        self.size += len(data)
        while len(self.buffer) >= self.part_size:
            part = bytes(self.buffer[: self.part_size])
            del self.buffer[: self.part_size]
            self._submit(part)

    def _submit(self, part: bytes) -> None:
        if self.upload_id is None:
            self._start()
        self._raise_failed()
        self.slots.acquire()
        number = len(self.futures) + 1
        self.futures.append(self.pool.submit(self._upload, number, part))

    def _upload(self, number: int, body: bytes) -> None:
        try:
            resp = self.store._call(
                f"upload part {number}",
                self.key,
                self.store.client.upload_part,
                Bucket=self.store.bucket,
                Key=self.key,
                UploadId=self.upload_id,
                PartNumber=number,
                Body=body,
            )
            self.parts[number] = resp["ETag"]
        finally:
            self.slots.release()

    def _raise_failed(self) -> None:
        for fut in self.futures:
            if fut.done() and fut.exception():
                raise fut.exception()  # type: ignore[misc]

    def commit(self) -> int:
        if self.buffer or not self.futures:
            self._submit(bytes(self.buffer))
            self.buffer.clear()
        try:
            for fut in self.futures:
                fut.result()
            parts = [{"PartNumber": n, "ETag": self.parts[n]} for n in sorted(self.parts)]
            self.store._call(
                "complete multipart upload",
                self.key,
                self.store.client.complete_multipart_upload,
                Bucket=self.store.bucket,
                Key=self.key,
                UploadId=self.upload_id,
                MultipartUpload={"Parts": parts},
            )
            self.upload_id = None  # completed: nothing left to abort
            self.store.ensure_retention(self.key, self.options)
        except BaseException:
            self.abort()
            raise
        finally:
            self.pool.shutdown(wait=True)
        return self.size

    def abort(self) -> None:
        for fut in self.futures:
            fut.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)
        if self.upload_id is not None:
            upload_id, self.upload_id = self.upload_id, None
            # The client's retries give an endpoint that is briefly down time to come back. If
            # the abort still fails, the next run of this host aborts the stale upload
            # (abort_stale_uploads) and the bucket's AbortIncompleteMultipartUpload rule expires it.
            try:
                self.store.client.abort_multipart_upload(
                    Bucket=self.store.bucket, Key=self.key, UploadId=upload_id
                )
            except Exception as exc:  # noqa: BLE001 - never mask the original failure
                log.warning(
                    "%s/%s: could not abort multipart upload %s (%s); the next run or the bucket's "
                    "AbortIncompleteMultipartUpload lifecycle rule removes it",
                    self.store.location,
                    self.key,
                    upload_id,
                    exc,
                )
