"""Dagster-free core: read run folders, join checkpoint states, render curator prompts."""
