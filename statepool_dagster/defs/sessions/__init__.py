"""Sessions: their partitions, the session states and prompts, their checks, job and sensor."""
