"""The sample runs and the simulated rollout of `statepool demo`."""
