"""Point-in-time recovery: the plan from manifests (backup + contiguous binlogs to the target),
the recovery itself, the binlog replay into a sandbox, the PITR restore test, and the restore
test's roll-forward over the shipped binlogs.
"""
