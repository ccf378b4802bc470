"""The store's files: Parquet parts per run table, state files, rejects, locks."""
