"""Runs: their partitions, the four run assets built in one step, their checks, job and sensor."""
