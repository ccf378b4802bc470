"""core/runs."""
