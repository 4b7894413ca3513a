"""Taking backups: the full-or-incremental decision, one backup run end to end (manifest last,
under the host lock), and files uploaded outside the streaming path.
"""
