"""core/export."""
