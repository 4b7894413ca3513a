"""Getting data back: restore a chain into an empty datadir, the prepare rules per flavour, the
standby copy kept prepared, integrity checks without restoring, the scheduled restore test and
its evidence (page checksums, the source's shape, the deep compare with the source), replicas
built from backups, and which objects of an archived chain need a Glacier restore first.
"""

from ..common.moved import moved_names

# The 0.1.0 names of this package, deprecated (core.common.moved).
__getattr__ = moved_names(
    __name__,
    {
        "restore": "xtrabackup_provider.core.restore.chain.restore",
    },
)
