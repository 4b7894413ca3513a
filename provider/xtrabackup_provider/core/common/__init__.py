"""Small helpers every domain uses: how child processes start (environment, open-files limit,
stderr summaries), private temporary directories that the next run sweeps after a killed one,
the values parsed at the boundary (times, GTIDs, binlog names), throttled progress logging, and
file sizes and hashes.
"""
