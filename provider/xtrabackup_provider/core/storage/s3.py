"""S3Store: multipart upload with bounded memory (core/storage/partplan.py; segments past one
object's capacity, core/storage/segments.py), storage class, SSE, Object Lock, ranged
parallel GET, and botocore errors turned into one line naming the endpoint, bucket and key.
"""

from __future__ import annotations

__all__ = ["S3Store", "make_s3_client"]

import bisect
import builtins
import contextlib
import hashlib
import io
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..common import secretenv
from .base import (
    LEGAL_HOLD,
    Deleted,
    LockReader,
    MiB,
    ObjectInfo,
    PutOptions,
    StorageError,
    Versioned,
    WrittenSegment,
    check_key,
    segment_key,
)
from .partplan import PartLimits, PartSizer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)
READ_ATTEMPTS = 4  # GETs whose answer was cut short, read again (S3Store._get)

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
    kwargs = secretenv.aws_credentials() | kwargs  # the CLI holds the keys out of os.environ
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=region, config=config, **kwargs)


@dataclass
class S3Store:
    client: Any
    bucket: str
    part_limits: PartLimits = field(default_factory=PartLimits)  # the multipart plan's bounds
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
        return self._get("get", key, Key=check_key(key))[1]

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
        return self._get("get", key, Key=key, Range=f"bytes={start}-{end}")[1]

    def _get(self, what: str, key: str, **kwargs: Any) -> tuple[dict[str, Any], bytes]:
        """GetObject and its body. botocore retries a request that fails, not the reading of its
        body: an answer the network cuts short (a reset, a proxy that closes mid-body) is asked
        for again, READ_ATTEMPTS times in all, before it is an error naming the key."""
        from botocore.exceptions import HTTPClientError, IncompleteReadError

        for attempt in range(1, READ_ATTEMPTS + 1):
            resp = self._call(what, key, self.client.get_object, Bucket=self.bucket, **kwargs)
            try:
                return resp, bytes(resp["Body"].read())
            except (HTTPClientError, IncompleteReadError) as exc:
                if attempt == READ_ATTEMPTS:
                    raise self.failure(what, key, exc) from exc
                log.warning(
                    "%s/%s: the answer was cut short (%s); asking again (%d of %d)",
                    self.location, key, exc, attempt + 1, READ_ATTEMPTS,
                )  # fmt: skip
                time.sleep(min(0.2 * 2**attempt, 5.0))
        raise AssertionError("unreachable")

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
            resp, data = self._get("get", key, Key=check_key(key))
        except StorageError as exc:
            if "no object" in str(exc):
                return None
            raise
        age = store_now = None
        date = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        modified = resp.get("LastModified")
        if date:
            from email.utils import parsedate_to_datetime

            with contextlib.suppress(TypeError, ValueError):
                store_now = parsedate_to_datetime(date)  # "-0000" as the zone: no zone, said as UTC
                store_now = store_now if store_now.tzinfo else store_now.replace(tzinfo=UTC)
        if store_now is not None and isinstance(modified, datetime):
            with contextlib.suppress(TypeError):  # a LastModified without a zone: no age
                age = max(timedelta(0), store_now - modified)
        return Versioned(data, str(resp["ETag"]), age, store_now)

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


class PartBody(io.RawIOBase):
    """A part as botocore reads it: a seekable, read-only file over the buffers the pipeline handed
    over, never joined into one copy (botocore reads it in blocks to sign, checksum and send it, and
    seeks back to retry)."""

    def __init__(self, views: builtins.list[memoryview]) -> None:
        super().__init__()
        self.views = views
        self.starts: builtins.list[int] = []
        at = 0
        for view in views:
            self.starts.append(at)
            at += len(view)
        self.size = at
        self.pos = 0

    def __len__(self) -> int:
        return self.size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, min(self.size, base + offset))
        return self.pos

    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        done = 0
        index = max(0, bisect.bisect_right(self.starts, self.pos) - 1)
        while done < len(out) and self.pos < self.size:
            view, offset = self.views[index], self.pos - self.starts[index]
            take = min(len(out) - done, len(view) - offset)
            out[done : done + take] = view[offset : offset + take]
            done += take
            self.pos += take
            index += 1
        return done


@dataclass
class _Segment:
    key: str
    upload_id: str | None = None
    etags: dict[int, str] = field(default_factory=dict)
    parts: int = 0
    size: int = 0
    digest: Any = field(default_factory=hashlib.sha256)
    completed: bool = False


class _S3MultipartWriter:
    """One stream as multipart uploads that follow the part plan (core/storage/partplan.py): the
    part being filled plus the parts in flight stay within the store's `part_limits.memory`, parts
    are the written buffers themselves (no copy), and a stream too long for one object continues
    in the next segment (core/storage/segments.py). Every segment's upload stays open until
    `commit()`, so nothing is visible before the stream succeeded; `abort()` aborts them all."""

    def __init__(self, store: S3Store, key: str, options: PutOptions) -> None:
        self.store, self.key, self.options = store, key, options
        self.sizer = PartSizer(store.part_limits, options.expected_size)
        self.step = self.sizer.next()
        self.opened: builtins.list[_Segment] = [_Segment(key)]
        self.pending: builtins.list[memoryview] = []
        self.pending_bytes = 0
        self.size = 0
        self.cond = threading.Condition()
        self.inflight = 0
        self.inflight_bytes = 0
        self.peak_held = 0  # the most this writer held at once (pending + in flight), in bytes
        self.futures: builtins.list[Future[None]] = []
        self.pool = ThreadPoolExecutor(store.part_limits.max_inflight, thread_name_prefix="s3put")
        self.segments: builtins.list[WrittenSegment] = []  # after commit()
        self.committed = False

    def write(self, data: bytes) -> None:
        # A part keeps views of the written buffers: copy only a buffer its owner may reuse.
        view = memoryview(data if isinstance(data, bytes) else bytes(data))
        self.size += len(view)
        while view:
            take = min(len(view), self.step.size - self.pending_bytes)
            self.pending.append(view[:take])
            self.pending_bytes += take
            view = view[take:]
            self.peak_held = max(self.peak_held, self.pending_bytes + self.inflight_bytes)
            if self.pending_bytes == self.step.size:
                self._submit()
                self.step = self.sizer.next()

    def _submit(self) -> None:
        if self.step.new_segment and self.opened[-1].parts:
            self.opened.append(_Segment(segment_key(self.key, len(self.opened))))
        views, size = self.pending, self.pending_bytes
        self.pending, self.pending_bytes = [], 0
        seg = self.opened[-1]
        if seg.upload_id is None:
            seg.upload_id = self._start(seg.key)
        for view in views:
            seg.digest.update(view)
        seg.parts += 1
        seg.size += size
        self.sizer.sent(size)
        with self.cond:
            while self.inflight >= self.step.inflight:
                self.cond.wait()
            self._raise_failed()
            self.inflight += 1
            self.inflight_bytes += size
        self.futures.append(self.pool.submit(self._upload, seg, seg.parts, views, size))

    def _start(self, key: str) -> str:
        resp = self.store._call(
            "create multipart upload",
            key,
            self.store.client.create_multipart_upload,
            Bucket=self.store.bucket,
            Key=key,
            **self.options.s3_args(),
        )
        return str(resp["UploadId"])

    def _upload(self, seg: _Segment, number: int, views: builtins.list[memoryview], size: int) -> None:
        try:
            resp = self.store._call(
                f"upload part {number}",
                seg.key,
                self.store.client.upload_part,
                Bucket=self.store.bucket,
                Key=seg.key,
                UploadId=seg.upload_id,
                PartNumber=number,
                Body=PartBody(views),
                ContentLength=size,
            )
            seg.etags[number] = resp["ETag"]
        finally:
            with self.cond:
                self.inflight -= 1
                self.inflight_bytes -= size
                self.cond.notify_all()

    def _raise_failed(self) -> None:
        for fut in self.futures:
            if fut.done() and fut.exception():
                raise fut.exception()  # type: ignore[misc]

    def commit(self) -> int:
        try:
            if self.pending_bytes or not self.opened[-1].parts:
                self._submit()
            for fut in self.futures:
                fut.result()
            for seg in self.opened:
                parts = [{"PartNumber": n, "ETag": seg.etags[n]} for n in sorted(seg.etags)]
                self.store._call(
                    "complete multipart upload",
                    seg.key,
                    self.store.client.complete_multipart_upload,
                    Bucket=self.store.bucket,
                    Key=seg.key,
                    UploadId=seg.upload_id,
                    MultipartUpload={"Parts": parts},
                )
                seg.upload_id, seg.completed = None, True  # nothing left to abort
                self.store.ensure_retention(seg.key, self.options)
        except BaseException:
            self.abort()
            raise
        finally:
            self.pool.shutdown(wait=True)
        if len(self.opened) > 1:
            self.segments = [WrittenSegment(s.key, s.size, s.digest.hexdigest()) for s in self.opened]
        self.committed = True
        return self.size

    def abort(self) -> None:
        for fut in self.futures:
            fut.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)
        for seg in self.opened:
            if seg.upload_id is not None:
                upload_id, seg.upload_id = seg.upload_id, None
                # The client's retries give an endpoint that is briefly down time to come back. If
                # the abort still fails, the next run of this host aborts the stale upload
                # (abort_stale_uploads) and the bucket's AbortIncompleteMultipartUpload rule expires it.
                try:
                    self.store.client.abort_multipart_upload(
                        Bucket=self.store.bucket, Key=seg.key, UploadId=upload_id
                    )
                except Exception as exc:  # noqa: BLE001 - never mask the original failure
                    log.warning(
                        "%s/%s: could not abort multipart upload %s (%s); the next run or the bucket's "
                        "AbortIncompleteMultipartUpload lifecycle rule removes it",
                        self.store.location,
                        seg.key,
                        upload_id,
                        exc,
                    )
        # Segments completed before a later one failed are objects no manifest names: remove them
        # (a version Object Lock keeps is named by the leftovers report and expires with its lock).
        # After a whole commit, abort() leaves the stream alone, as it always did.
        if not self.committed and (done := [s.key for s in self.opened if s.completed]):
            try:
                self.store.delete(done)
            except Exception as exc:  # noqa: BLE001 - never mask the original failure
                log.warning(
                    "%s: could not remove the completed segments %s (%s)", self.store.location, done, exc
                )
