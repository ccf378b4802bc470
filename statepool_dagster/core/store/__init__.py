"""core/store."""
