"""Binlogs for point-in-time recovery: the binlog file format and GTIDs, the shipped binlogs'
manifests and index, batch shipping over the replication protocol, continuous shipping, and
the replicas this provider sets up (start position from a backup, CHANGE MASTER, catching up,
binlogs the source has purged).
"""
