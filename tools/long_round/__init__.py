"""Long-run round: the original script against ``statepool sync`` on long and odd runs.

A manual harness, not a test: run it by hand from the repository's root, under ``nice``::

    nice -n 19 .venv/bin/python -m tools.long_round OUTDIR [--quick] [--only NAME_PART ...]

Each case builds a runs folder, runs the original script
(``../shared/reference/statepool_seed.py`` or ``$STATEPOOL_SEED``) into a fresh folder and
``statepool sync`` on a fresh ``DAGSTER_HOME`` and store, each timed with ``/usr/bin/time
-v`` (wall, peak RSS of the process and its children), and compares the state files: the
same names, byte for byte. Growth cases sync after each step and compare every time.
Prints one row per measured step: case, result (match / DIFF / crash), wall, peak RSS.
The exit code is the number of rows that are not ``match``.
"""
