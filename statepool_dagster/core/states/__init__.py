"""Checkpoint states: the join of snapshots and episode batches, reference ops."""
