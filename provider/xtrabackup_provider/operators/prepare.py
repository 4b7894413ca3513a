"""Single prepare steps for user DAGs: XtraBackupPrepareOperator and XtraBackupFinalPrepareOperator.

The flavour rules are enforced by the core: MariaBackup 10.5+ refuses --apply-log-only, and
the final prepare is simply a step without it.
"""

from __future__ import annotations

__all__ = ["XtraBackupPrepareOperator", "XtraBackupFinalPrepareOperator"]

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from ..arguments import KeptArguments, keep_arguments


class XtraBackupPrepareOperator(KeptArguments, BaseOperator):
    """`--prepare` on `target_dir`, optionally merging `incremental_dir`, with `--apply-log-only`
    when more incrementals will follow (XtraBackup only)."""

    template_fields: Sequence[str] = ("target_dir", "incremental_dir")

    def __init__(
        self,
        *,
        target_dir: str,
        incremental_dir: str | None = None,
        apply_log_only: bool = True,
        flavour: str = "xtrabackup",
        binary: str | None = None,
        use_memory: int | None = None,
        parallel: int = 4,
        max_free_memory_pct: int = 50,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        keep_arguments(self, locals())

    def execute(self, context: Any) -> dict[str, Any]:
        from ..core.engine.argv import PrepareStep
        from ..core.engine.tools import detect_tool
        from ..core.restore import prepare

        tool = detect_tool("xtrabackup" if self.flavour == "xtrabackup" else "mariabackup", self.binary)
        apply_log_only = self.apply_log_only and tool.capabilities.apply_log_only
        step = PrepareStep(self.target_dir, self.incremental_dir, apply_log_only)
        dirs = [Path(d) for d in (self.target_dir, self.incremental_dir) if d]
        tuning = prepare.tuning_for(
            tool,
            dirs,
            max_free_pct=self.max_free_memory_pct,
            parallel=self.parallel,
            use_memory=self.use_memory,
        )
        report = prepare.run_step(tool, step, tuning)
        return {
            "target_dir": self.target_dir,
            "final": step.is_final,
            "seconds": report.seconds,
            "use_memory": tuning.use_memory_bytes,
        }


class XtraBackupFinalPrepareOperator(XtraBackupPrepareOperator):
    """The last step: applies undo; after it no further incremental can be merged (XtraBackup)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["apply_log_only"] = False
        super().__init__(**kwargs)
