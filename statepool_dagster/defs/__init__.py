"""The Dagster face: partitions, assets, checks, sensors, jobs, executors, resources, store.

One module a kind; ``statepool_dagster.definitions`` gathers them into the code location.
"""
