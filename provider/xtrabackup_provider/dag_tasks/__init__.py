"""Tasks the shipped DAGs build from the fleet config: the checksum and binlog gates around a
host's backup, and the Glacier restore steps before a restore test. They take config objects and
return operators, so they stay out of operators/ and sensors/.
"""
