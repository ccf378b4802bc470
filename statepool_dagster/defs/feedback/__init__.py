"""Feedback: ``state_stats`` folded from sealed feedback segments, its job and sensor."""
