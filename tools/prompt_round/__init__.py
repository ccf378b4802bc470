"""Prompt round: the curator prompt under other templates and inference sides, differentially.

A manual harness, not a test: run it by hand from the repository's root, under ``nice``::

    nice -n 19 .venv/bin/python -m tools.prompt_round /tmp/pr [--cases 3000] [--seed 1]
        [--syncs 4] [--timeout 20]

It generates, with a seeded RNG, combinations of a curator template, a parameter rule,
tool specs, an episode formatter (each given as ``module:attr`` or as a file, as a user
would set ``STATEPOOL_PROMPT_TEMPLATE`` & co.) and a state (from generated runs, then
mutated), and renders each one twice:

- the original (``../shared/reference/statepool_seed.py`` or ``$STATEPOOL_SEED``), its
  ``infer.*`` imports served by fake modules holding exactly what our loader was given;
- ours, through ``PromptSpec.load`` and ``build_curator_prompt`` (the core function the
  prompts stage calls), in a worker process; a case that takes longer than ``--timeout``
  is killed and recorded as a hang.

Then ``--syncs`` configurations go through the product: ``statepool sync --json`` over
generated and mutated runs, the prompts read back with ``load_prompts`` and the rejects
from ``store/rejects/``, each compared with the original rendering the state file we wrote.

The rule checked: where the original renders, ours is the same text; where it raises,
ours raises a configuration error (``StatepoolError`` naming the placeholder, when the
template is loaded) or sets the prompt aside (``PromptInputError``), never crashes or hangs.
A text file stands for the string a module would hold if its text were written there as a
literal: UTF-8, a leading BOM dropped, newlines read as Python reads source (``\\r\\n`` and
``\\r`` are ``\\n``). Documented divergences are printed ``NOTE``, the rest ``FLAG``; the
exit code is the number of FLAG lines (capped at 100). ``OUTDIR/findings.jsonl`` has them all.
"""
