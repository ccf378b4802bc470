"""The trainer's exports: rows from runs and sessions, splits, verl/TRL/pool."""
