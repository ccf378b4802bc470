"""Tag keys this code location writes on runs."""

# The run files' fingerprint a one-run request was made for (informational: the sensor's
# run_key carries it too). What a materialization actually read is its metadata.
SOURCE_FINGERPRINT = "statepool/source_fingerprint"
# The pid of the ``statepool sync`` running a run: a run whose sync died is failed later.
SYNC_PID = "statepool/sync_pid"
