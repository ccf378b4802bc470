"""Hostile-input round: mutated run folders, the original script against ``statepool sync``.

A manual harness, not a test: run it by hand from the repository's root, under ``nice``::

    nice -n 19 .venv/bin/python -m tools.hostile_round /tmp/h3 [--only NAME_PART ...]

It builds one run folder per mutation (from ``generate_run``), runs the original script
(``../shared/reference/statepool_seed.py`` or ``$STATEPOOL_SEED``) once per run, as a
script in a subprocess with a timeout, then one ``statepool sync --json`` over them all,
and checks issue 14's rule for each run:

- no hang, no non-zero exit, no failed run, no traceback;
- where the original succeeds and we reject nothing, the same state files, byte for byte;
- a state both write that differs is explained by a reject of that run;
- where the original crashes, we reject (or ignore) something in that run.

Findings that are documented choices (docs/input-rules.md) are printed as ``NOTE``;
the rest as ``FLAG``. The exit code is the number of FLAG lines (capped at 100).
"""
