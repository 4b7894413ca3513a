"""Object stores. `base` is the small protocol every store implements (writers stage data
invisibly until commit; S3-only features are methods and flags of the protocol, never
`isinstance`), `local` a directory, `s3` S3 (multipart, SSE, Object Lock, ranged parallel GET),
`lifecycle` the bucket rules for colder tiers, `glacier` the restore requests of archived objects.
"""

from ..common.moved import moved_names

# The 0.1.0 names of this package, deprecated (core.common.moved).
__getattr__ = moved_names(
    __name__,
    {
        "S3Store": "xtrabackup_provider.core.storage.s3.S3Store",
        "make_s3_client": "xtrabackup_provider.core.storage.s3.make_s3_client",
        "LocalStore": "xtrabackup_provider.core.storage.local.LocalStore",
        "ObjectStore": "xtrabackup_provider.core.storage.base.ObjectStore",
    },
)
