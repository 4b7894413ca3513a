"""Planted product bugs (issue 39, "Done when"): CHAOS_PLANT=<bug> runs the fleet (its Airflow and
the faults' CLIs) against a copy of the committed provider (git HEAD) made in the run's directory
with one bug patched in; the checker's own CLI keeps the checkout's. Nothing in the product reads anything for this: the
copy is patched text, and its bug goes live when the run writes `<copy>/LIVE` (at the start of the
fault phase), so the fleet's first backups and shipping are sound and the catch time counts from
then.

- retention: retention deletes one chain too many (every backup of the oldest chain the policy
  keeps whole, whatever else keeps it);
- shipping: the continuous follower silently stops storing anything (no error, no log line);
- manifest: each progress upload of the open binlog registers its new segment under the previous
  segment's key and size (the manifest names the wrong object; sizes add up).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# bug -> (file under the package, the text to find, what replaces it); {live} is the LIVE test.
PATCHES: dict[str, tuple[str, str, str]] = {
    "retention": (
        "core/retention/plan.py",
        "        self._close_over_parents()\n",
        "        self._close_over_parents()\n"
        "        if {live}:  # PLANTED: one chain too many\n"
        "            count = policy.keep_last_chains or 0\n"
        "            roots = list(dict.fromkeys(self.root[b] for b in self.newest_first if self.error(b) is None))\n"
        "            if 0 < count <= len(roots):\n"
        "                doomed = roots[count - 1]\n"
        "                for bid in [b for b in self.reason if self.root[b] == doomed]:\n"
        "                    del self.reason[bid]\n",
    ),
    "shipping": (
        "core/binlog/follow.py",
        "    def sweep(self, final: bool = False) -> None:\n",
        "    def sweep(self, final: bool = False) -> None:\n"
        "        if {live}:  # PLANTED: the follower silently stops\n"
        "            return\n",
    ),
    "manifest": (
        "core/binlog/ship.py",
        "        segments = (list(partial.segments) if partial else []) + new\n",
        "        if {live} and new and partial and partial.segments:  # PLANTED: names the wrong object\n"
        "            prev = partial.segments[-1].object\n"
        "            wrong = new[0].object.model_copy(update={{'key': prev.key, 'size': prev.size}})\n"
        "            new = [new[0].model_copy(update={{'object': wrong}})]\n"
        "        segments = (list(partial.segments) if partial else []) + new\n",
    ),
}


def plant(bug: str, into: Path) -> Path:
    """A copy of the provider under `into` with `bug` planted; returns the directory to put first
    on the fleet's PYTHONPATH. Its LIVE file (absent) turns the bug on."""
    if bug not in PATCHES:
        raise SystemExit(f"error: CHAOS_PLANT={bug!r}: the planted bugs are {', '.join(PATCHES)}")
    root = into / "planted"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    # The committed package (HEAD), not the working tree: other work in progress there stays out.
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD", "provider/xtrabackup_provider"],
                             capture_output=True, check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(root), "--strip-components=1"], input=archive, check=True)
    rel, old, new = PATCHES[bug]
    path = root / "xtrabackup_provider" / rel
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(
            f"error: CHAOS_PLANT={bug}: {rel} no longer holds the line the bug is planted at: {old!r}"
        )
    live = f"__import__('os').path.exists({str(root / 'LIVE')!r})"
    path.write_text(text.replace(old, new.format(live=live)))
    return root


def go_live(root: Path) -> None:
    (root / "LIVE").write_text("")
