"""Streaming without staging: the processes of a stream and their error reporting, backup
(producer -> zstd -> gpg -> object writer) and restore (stored bytes -> gpg -d -> zstd -d ->
extractor), and the GPG homes and keys the gpg stages use.
"""
