"""Tag keys this code location writes and reads."""

SOURCE_FINGERPRINT = "statepool/source_fingerprint"
