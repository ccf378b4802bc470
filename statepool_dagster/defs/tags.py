"""Tag keys this code location writes on runs, and the run tags of Dagster's it reads."""

# The run files' fingerprint a one-run request was made for (informational: the sensor's
# run_key carries it too). What a materialization actually read is its metadata.
SOURCE_FINGERPRINT = "statepool/source_fingerprint"
# The pid of the ``statepool sync`` running a run: a run whose sync died is failed later.
SYNC_PID = "statepool/sync_pid"
# What the runs sensor saw of a requested run's files: new | changed.
CHANGE = "statepool/change"
# How many sealed segments past the sessions sensor's cursor a session's run builds.
NEW_SEGMENTS = "statepool/new_segments"

# Dagster's own run tags for a run's partition and a single run over a range of partitions
# (the tags the UI's launchpad and `dg launch --partition-range` write; Dagster reads them
# back to choose what a run covers).
PARTITION = "dagster/partition"
PARTITION_RANGE_START = "dagster/asset_partition_range_start"
PARTITION_RANGE_END = "dagster/asset_partition_range_end"
