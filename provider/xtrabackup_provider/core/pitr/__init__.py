"""Point-in-time recovery: the plan from manifests (backup + contiguous binlogs to the target),
the recovery itself, the binlog replay into a sandbox, and the PITR restore test.
"""
