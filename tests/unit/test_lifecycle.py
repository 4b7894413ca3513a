"""Lifecycle rule specs -> S3 rules, their validation, and the merge that never clobbers others' rules."""

from __future__ import annotations

import copy

import pytest

from xtrabackup_provider.core.storage.base import ARCHIVE_TAG
from xtrabackup_provider.core.storage.lifecycle import LifecycleError, desired_rules, merge, parse_specs

SPEC = {
    "id": "xbp-main",
    "prefix": "backups/main/",
    "transitions": [
        {"days": 30, "storage_class": "GLACIER_IR"},
        {"days": 90, "storage_class": "DEEP_ARCHIVE"},
    ],
    "abort_incomplete_multipart_days": 3,
}
THEIRS = [
    {"ID": "logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 30}},
    {"ID": "legacy", "Status": "Disabled", "Prefix": "old/", "Expiration": {"Days": 7}},
]


def test_a_spec_becomes_a_tag_filtered_transition_rule_and_a_prefix_abort_rule():
    transition, abort = desired_rules([SPEC])
    assert transition == {
        "ID": "xbp-main",
        "Status": "Enabled",
        "Filter": {
            "And": {"Prefix": "backups/main/", "Tags": [{"Key": ARCHIVE_TAG[0], "Value": ARCHIVE_TAG[1]}]}
        },
        "Transitions": [
            {"Days": 30, "StorageClass": "GLACIER_IR"},
            {"Days": 90, "StorageClass": "DEEP_ARCHIVE"},
        ],
    }
    # S3 refuses a tag filter on AbortIncompleteMultipartUpload: a separate rule on the prefix.
    assert abort == {
        "ID": "xbp-main-abort-mpu",
        "Status": "Enabled",
        "Filter": {"Prefix": "backups/main/"},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 3},
    }
    only_abort = desired_rules([{"id": "mpu", "abort_incomplete_multipart_days": 1}])
    assert [r["ID"] for r in only_abort] == ["mpu-abort-mpu"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"transitions": [{"days": 10, "storage_class": "STANDARD_IA"}]},
            "STANDARD_IA needs at least 30 days",
        ),
        (
            {
                "transitions": [
                    {"days": 90, "storage_class": "GLACIER"},
                    {"days": 30, "storage_class": "DEEP_ARCHIVE"},
                ]
            },
            "days must increase: 90 then 30",
        ),
        (
            {
                "transitions": [
                    {"days": 30, "storage_class": "GLACIER"},
                    {"days": 90, "storage_class": "GLACIER_IR"},
                ]
            },
            "colder tiers only",
        ),
        ({"transitions": [{"days": 30, "storage_class": "STANDARD"}]}, "transitions.0.storage_class"),
        ({"transitions": [], "abort_incomplete_multipart_days": None}, "give transitions"),
        ({"id": "has space"}, "id"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_specs_are_refused_naming_the_rule_and_field(change, message):
    spec = {**copy.deepcopy(SPEC), **change}
    with pytest.raises(LifecycleError) as info:
        parse_specs([spec])
    assert message in str(info.value)
    assert str(info.value).startswith(f"lifecycle rule {spec['id']}")


def test_rule_ids_must_be_unique_across_specs():
    with pytest.raises(LifecycleError, match="repeated: \\['xbp-main', 'xbp-main-abort-mpu'\\]"):
        parse_specs([SPEC, SPEC])


def test_merge_adds_ours_after_theirs_and_leaves_theirs_untouched():
    theirs = copy.deepcopy(THEIRS)
    merged, result = merge(theirs, desired_rules([SPEC]), "b")
    assert merged[:2] == THEIRS
    assert [r["ID"] for r in merged] == ["logs", "legacy", "xbp-main", "xbp-main-abort-mpu"]
    assert (result.added, result.updated, result.unchanged, result.kept) == (
        ["xbp-main", "xbp-main-abort-mpu"],
        [],
        [],
        ["logs", "legacy"],
    )


def test_merge_is_idempotent_and_replaces_only_our_changed_rule_in_place():
    first, _ = merge(copy.deepcopy(THEIRS), desired_rules([SPEC]), "b")
    again, result = merge(copy.deepcopy(first), desired_rules([SPEC]), "b")
    assert again == first and not result.added and not result.updated
    assert result.unchanged == ["xbp-main", "xbp-main-abort-mpu"]

    changed = {**SPEC, "transitions": [{"days": 60, "storage_class": "GLACIER"}]}
    third, result = merge(copy.deepcopy(first), desired_rules([changed]), "b")
    assert result.updated == ["xbp-main"] and result.unchanged == ["xbp-main-abort-mpu"]
    assert [r["ID"] for r in third] == ["logs", "legacy", "xbp-main", "xbp-main-abort-mpu"]
    assert third[2]["Transitions"] == [{"Days": 60, "StorageClass": "GLACIER"}]
    assert third[:2] == THEIRS


def test_merge_refuses_to_exceed_the_s3_rule_limit():
    many = [{"ID": f"r{n}", "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 1}} for n in range(999)]
    with pytest.raises(LifecycleError, match="1001 lifecycle rules; S3 allows 1000"):
        merge(many, desired_rules([SPEC]), "b")
