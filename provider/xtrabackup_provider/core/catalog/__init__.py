"""The catalog in object storage, the only source of truth: backup manifests (the commit
marker, written last, with the source's shape at backup time), chain rules validated from
manifests alone, one host's backups, the restore reports written beside them, and the host lock
that lets one run at a time register.
"""

from ..common.moved import moved_names

# The 0.1.0 names of this package, deprecated (core.common.moved).
__getattr__ = moved_names(
    __name__,
    {
        "Catalog": "xtrabackup_provider.core.catalog.backups.Catalog",
    },
)
