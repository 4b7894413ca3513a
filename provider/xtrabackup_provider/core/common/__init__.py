"""Small helpers every domain uses: private temporary directories that the next run sweeps
after a killed one, throttled progress logging, and file sizes and hashes.
"""
