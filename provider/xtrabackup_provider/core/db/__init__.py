"""The database server: connections and the 0600 defaults file the tools read, server facts,
its tables as information_schema reports them, the heartbeat canary, throwaway sandbox servers,
and consistency (pt-table-checksum runs on the source, the replica gate that reads their results).
"""
