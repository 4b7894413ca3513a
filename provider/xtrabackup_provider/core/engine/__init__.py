"""XtraBackup and MariaBackup: tool versions -> capabilities, the argv of every step (credentials
only through a defaults file), the metadata files they write, and a framing check of their
xbstream output. Pure, except `tools.detect_tool`.
"""

from ..common.moved import moved_names

# The 0.1.0 names of this package, deprecated (core.common.moved).
__getattr__ = moved_names(
    __name__,
    {
        "EngineError": "xtrabackup_provider.core.engine.tools.EngineError",
        "ToolVersion": "xtrabackup_provider.core.engine.tools.ToolVersion",
        "Capabilities": "xtrabackup_provider.core.engine.tools.Capabilities",
        "parse_tool_version": "xtrabackup_provider.core.engine.tools.parse_tool_version",
        "detect_tool": "xtrabackup_provider.core.engine.tools.detect_tool",
        "BackupOptions": "xtrabackup_provider.core.engine.argv.BackupOptions",
        "backup_argv": "xtrabackup_provider.core.engine.argv.backup_argv",
        "PrepareStep": "xtrabackup_provider.core.engine.argv.PrepareStep",
        "PrepareTuning": "xtrabackup_provider.core.engine.argv.PrepareTuning",
        "prepare_steps": "xtrabackup_provider.core.engine.argv.prepare_steps",
        "prepare_argv": "xtrabackup_provider.core.engine.argv.prepare_argv",
        "copy_back_argv": "xtrabackup_provider.core.engine.argv.copy_back_argv",
        "extract_argv": "xtrabackup_provider.core.engine.argv.extract_argv",
        "parse_key_values": "xtrabackup_provider.core.engine.metadata.parse_key_values",
        "Checkpoints": "xtrabackup_provider.core.engine.metadata.Checkpoints",
        "parse_checkpoints": "xtrabackup_provider.core.engine.metadata.parse_checkpoints",
        "BinlogPosition": "xtrabackup_provider.core.engine.metadata.BinlogPosition",
        "parse_binlog_info": "xtrabackup_provider.core.engine.metadata.parse_binlog_info",
        "parse_binlog_pos": "xtrabackup_provider.core.engine.metadata.parse_binlog_pos",
        "BackupInfo": "xtrabackup_provider.core.engine.metadata.BackupInfo",
        "parse_info": "xtrabackup_provider.core.engine.metadata.parse_info",
        "find_metadata": "xtrabackup_provider.core.engine.metadata.find_metadata",
        "read_checkpoints": "xtrabackup_provider.core.engine.metadata.read_checkpoints",
        "read_info": "xtrabackup_provider.core.engine.metadata.read_info",
        "read_binlog_position": "xtrabackup_provider.core.engine.metadata.read_binlog_position",
    },
)
