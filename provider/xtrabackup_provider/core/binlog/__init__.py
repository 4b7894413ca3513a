"""Binlogs for point-in-time recovery: the binlog file format and GTIDs, the shipped binlogs'
manifests and index, batch shipping over the replication protocol, and continuous shipping.
"""
