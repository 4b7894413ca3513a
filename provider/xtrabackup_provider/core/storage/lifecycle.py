"""Bucket lifecycle rules for backups: transitions to colder tiers and expiry of abandoned uploads.

A rule spec (JSON-like, so an operator can take it) becomes up to two S3 rules:
  <id>            transitions after N days, only for objects tagged xbp-archive=true (backup
                  data; manifests are not tagged, so listing and chain checks never hit Glacier)
  <id>-abort-mpu  AbortIncompleteMultipartUpload after N days for everything under the prefix
                  (S3 does not allow a tag filter on this action)
  <id>-noncurrent on a versioned bucket (Object Lock buckets are): NoncurrentVersionExpiration
                  after N days and ExpiredObjectDeleteMarker for everything under the prefix, a
                  net for the versions that overwrites and plain deletes leave behind (retention
                  itself deletes every version of what it removes; core/storage/s3.py)

Installing merges by rule ID: rules of other owners are put back exactly as read, ours are
added or replaced, and nothing is written when the bucket already has what we want.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .base import ARCHIVE_TAG

# Colder to the right; S3 only transitions "down" this list.
TIER_ORDER = ("STANDARD_IA", "INTELLIGENT_TIERING", "ONEZONE_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE")
IA_MIN_DAYS = 30  # S3 refuses transitions to the IA classes before 30 days
ABORT_SUFFIX = "-abort-mpu"
NONCURRENT_SUFFIX = "-noncurrent"
MAX_RULES = 1000


class LifecycleError(ValueError):
    """A rule spec is invalid or the bucket does not hold the rules; the message names the rule."""


class Transition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    days: int = Field(ge=0, le=36500)
    storage_class: Literal[
        "STANDARD_IA", "INTELLIGENT_TIERING", "ONEZONE_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"
    ]


class RuleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
    prefix: str = Field("", max_length=1024)
    transitions: list[Transition] = Field(default_factory=list, max_length=len(TIER_ORDER))
    abort_incomplete_multipart_days: int | None = Field(None, ge=1, le=3650)
    noncurrent_version_days: int | None = Field(None, ge=1, le=36500)

    @model_validator(mode="after")
    def _sane(self) -> RuleSpec:
        if (
            not self.transitions
            and self.abort_incomplete_multipart_days is None
            and not self.noncurrent_version_days
        ):
            raise ValueError(
                "give transitions, abort_incomplete_multipart_days, noncurrent_version_days, or several"
            )
        previous: Transition | None = None
        for t in self.transitions:
            if t.storage_class in ("STANDARD_IA", "ONEZONE_IA") and t.days < IA_MIN_DAYS:
                raise ValueError(f"{t.storage_class} needs at least {IA_MIN_DAYS} days, not {t.days}")
            if previous and t.days <= previous.days:
                raise ValueError(f"transition days must increase: {previous.days} then {t.days}")
            if previous and TIER_ORDER.index(t.storage_class) <= TIER_ORDER.index(previous.storage_class):
                raise ValueError(
                    f"transitions go to colder tiers only ({' > '.join(TIER_ORDER)}): "
                    f"{previous.storage_class} then {t.storage_class}"
                )
            previous = t
        return self

    def s3_rules(self) -> list[dict[str, Any]]:
        rules: list[dict[str, Any]] = []
        if self.transitions:
            tag = {"Key": ARCHIVE_TAG[0], "Value": ARCHIVE_TAG[1]}
            rules.append(
                {
                    "ID": self.id,
                    "Status": "Enabled",
                    "Filter": {"And": {"Prefix": self.prefix, "Tags": [tag]}},
                    "Transitions": [
                        {"Days": t.days, "StorageClass": t.storage_class} for t in self.transitions
                    ],
                }
            )
        if self.abort_incomplete_multipart_days is not None:
            rules.append(
                {
                    "ID": self.id + ABORT_SUFFIX,
                    "Status": "Enabled",
                    "Filter": {"Prefix": self.prefix},
                    "AbortIncompleteMultipartUpload": {
                        "DaysAfterInitiation": self.abort_incomplete_multipart_days
                    },
                }
            )
        if self.noncurrent_version_days is not None:
            rules.append(
                {
                    "ID": self.id + NONCURRENT_SUFFIX,
                    "Status": "Enabled",
                    "Filter": {"Prefix": self.prefix},
                    "NoncurrentVersionExpiration": {"NoncurrentDays": self.noncurrent_version_days},
                    "Expiration": {"ExpiredObjectDeleteMarker": True},
                }
            )
        return rules


def parse_specs(specs: Iterable[dict[str, Any]]) -> list[RuleSpec]:
    out = []
    for n, spec in enumerate(specs):
        try:
            out.append(RuleSpec.model_validate(spec))
        except ValidationError as exc:
            where = spec.get("id", f"#{n + 1}") if isinstance(spec, dict) else f"#{n + 1}"
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(rule)'}: {e['msg']}" for e in exc.errors()[:5]
            )
            raise LifecycleError(f"lifecycle rule {where}: {problems}") from None
    ids = [r["ID"] for spec in out for r in spec.s3_rules()]
    if dup := sorted({i for i in ids if ids.count(i) > 1}):
        raise LifecycleError(f"lifecycle rule ids must be unique; repeated: {dup}")
    return out


def desired_rules(specs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [rule for spec in parse_specs(specs) for rule in spec.s3_rules()]


@dataclass
class LifecycleResult:
    bucket: str
    written: bool
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # other owners' rules, put back untouched


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def merge(
    existing: list[dict[str, Any]], desired: list[dict[str, Any]], bucket: str
) -> tuple[list[dict[str, Any]], LifecycleResult]:
    """Existing rules in their order with ours replaced by ID, then our new ones."""
    want = {r["ID"]: r for r in desired}
    result = LifecycleResult(bucket, written=False)
    merged = []
    for rule in existing:
        rule_id = rule.get("ID", "")
        if rule_id not in want:
            result.kept.append(rule_id)
            merged.append(rule)
        elif _same(rule, want[rule_id]):
            result.unchanged.append(rule_id)
            merged.append(rule)
        else:
            result.updated.append(rule_id)
            merged.append(want[rule_id])
    have = {r.get("ID") for r in existing}
    for rule in desired:
        if rule["ID"] not in have:
            result.added.append(rule["ID"])
            merged.append(rule)
    if len(merged) > MAX_RULES:
        raise LifecycleError(
            f"bucket {bucket} would have {len(merged)} lifecycle rules; S3 allows {MAX_RULES}"
        )
    return merged, result


def read_rules(client: Any, bucket: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(rules, extra put arguments to keep) of the bucket; no configuration is an empty list."""
    from botocore.exceptions import ClientError

    try:
        resp = client.get_bucket_lifecycle_configuration(Bucket=bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NoSuchLifecycleConfiguration":
            return [], {}
        raise LifecycleError(f"cannot read the lifecycle configuration of bucket {bucket}: {exc}") from exc
    keep = {}
    if "TransitionDefaultMinimumObjectSize" in resp:
        keep["TransitionDefaultMinimumObjectSize"] = resp["TransitionDefaultMinimumObjectSize"]
    return list(resp.get("Rules", [])), keep


def check(client: Any, bucket: str, specs: Iterable[dict[str, Any]]) -> list[str]:
    """What the bucket lacks or has differently from the specs; empty when it matches."""
    existing = {r.get("ID"): r for r in read_rules(client, bucket)[0]}
    problems = []
    for rule in desired_rules(specs):
        have = existing.get(rule["ID"])
        if have is None:
            problems.append(f"bucket {bucket}: lifecycle rule {rule['ID']} is missing")
        elif not _same(have, rule):
            problems.append(
                f"bucket {bucket}: lifecycle rule {rule['ID']} differs: has {json.dumps(have, default=str)}, "
                f"expected {json.dumps(rule)}"
            )
    return problems


def install(client: Any, bucket: str, specs: Iterable[dict[str, Any]]) -> LifecycleResult:
    """Merge our rules into the bucket's configuration; write only if something changes, then re-check."""
    specs = list(specs)
    desired = desired_rules(specs)
    existing, keep = read_rules(client, bucket)
    merged, result = merge(existing, desired, bucket)
    if result.added or result.updated:
        try:
            client.put_bucket_lifecycle_configuration(
                Bucket=bucket, LifecycleConfiguration={"Rules": merged}, **keep
            )
        except Exception as exc:
            raise LifecycleError(f"bucket {bucket}: S3 refused the lifecycle rules: {exc}") from exc
        result.written = True
        if problems := check(client, bucket, specs):
            raise LifecycleError("the bucket did not keep the rules written: " + "; ".join(problems))
    return result
