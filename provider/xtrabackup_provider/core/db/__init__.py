"""The database server: a verb's one session with it (its connection, dialect and facts, passed
down to every helper), connections and the 0600 defaults file the tools read, server facts,
its tables as information_schema reports them, the heartbeat canary, throwaway sandbox servers,
and consistency (pt-table-checksum runs on the source, the replica gate that reads their results).
"""
