"""XtraBackup and MariaBackup: tool versions -> capabilities, the argv of every step (credentials
only through a defaults file), the metadata files they write, and a framing check of their
xbstream output. Pure, except `tools.detect_tool`.
"""
