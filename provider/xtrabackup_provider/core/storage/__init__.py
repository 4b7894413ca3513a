"""Object stores. `base` is the small protocol every store implements (writers stage data
invisibly until commit; S3-only features are methods and flags of the protocol, never
`isinstance`), `local` a directory, `s3` S3 (multipart, SSE, Object Lock, ranged parallel GET),
`lifecycle` the bucket rules for colder tiers, `glacier` the restore requests of archived objects.
"""
