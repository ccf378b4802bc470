"""core/states."""
