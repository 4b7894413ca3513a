"""The restore's keyring trades the agent's key-derivation cost for speed; keys we hand out do not."""

from __future__ import annotations

import re
import subprocess

from xtrabackup_provider.core.pipeline.gpg import AGENT_S2K_COUNT, GpgHome, generate_key_pair


def _protect_counts(armored_private_key: str) -> list[int]:
    with GpgHome() as home:
        proc = subprocess.run(
            ["gpg", "--homedir", str(home.path), "--list-packets"],
            input=armored_private_key.encode(),
            capture_output=True,
            check=False,
        )
    return [int(n) for n in re.findall(rb"protect count: (\d+)", proc.stdout)]


def test_keygen_exports_the_private_key_under_gpgs_calibrated_protection():
    pair = generate_key_pair("backup test <backup@example.invalid>", "a long passphrase")
    counts = _protect_counts(pair.private_key)
    assert counts, "the exported private key is not passphrase-protected"
    assert min(counts) > AGENT_S2K_COUNT, counts


def test_a_home_that_imports_a_private_key_uses_the_cheap_count_and_still_unlocks_only_with_it():
    pair = generate_key_pair("backup test <backup@example.invalid>", "a long passphrase")
    with GpgHome() as home:
        home.import_private_key(pair.private_key, "a long passphrase")
        assert f"s2k-count {AGENT_S2K_COUNT}" in (home.path / "gpg-agent.conf").read_text()
        stored = [p.read_bytes() for p in (home.path / "private-keys-v1.d").glob("*.key")]
    assert stored and all(b"(protected-private-key" in key for key in stored)
