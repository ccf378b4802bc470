"""The selection engine's rules: which copy of each state a trainer gets."""

from __future__ import annotations

from statepool_dagster.core.export.selection import CopyRules, kept_alone

A, B, C = b"a" * 16, b"b" * 16, b"c" * 16


def test_the_earliest_run_keeps_a_duplicate_and_names_it():
    rules = CopyRules()
    assert rules.run_copy("run1_ckpt0", A) is None
    assert rules.run_copy("run2_ckpt0", A) == "run1_ckpt0"
    assert rules.run_copy("run2_ckpt1", B) is None


def test_a_run_state_wins_over_a_sessions_of_its_id_or_content():
    rules = CopyRules()
    rules.run_copy("run1_ckpt0", A)
    assert rules.session_id("s1", "run1_ckpt0") == "identical to run1's (a run state wins)"
    assert rules.session_id("s1", "x") is None
    why = rules.session_copy("s1", "x", A, prompt=True)
    assert why == "identical to run1's (a run state wins)"


def test_the_earliest_session_keeps_a_state_two_sessions_share():
    rules = CopyRules()
    assert rules.session_state("s1", "x", A, True)
    assert rules.session_id("s2", "x") == "identical to session s1's"
    assert rules.session_copy("s2", "y", A, prompt=True) == (
        "identical to session s1's (the earliest keeps)"
    )


def test_a_session_state_without_a_prompt_or_too_old_is_left_out_and_keeps_nothing():
    rules = CopyRules(max_staleness=2)
    assert rules.session_copy("s1", "x", A, prompt=True, policy_step=1, oldest=3) == (
        "older than policy step 3 (--max-staleness 2)"
    )
    assert rules.session_copy("s1", "y", B, prompt=True, oldest=3) == (
        "without a policy step (--max-staleness 2)"
    )
    assert rules.session_copy("s1", "z", C, prompt=False, policy_step=3, oldest=3) == (
        "without a prompt (its rendering was rejected)"
    )
    assert rules.session_copy("s2", "x", A, prompt=True, policy_step=5, oldest=3) is None


def test_only_a_sessions_first_copy_of_a_state_counts_where_copies_repeat():
    rules = CopyRules(repeats=True)
    assert not rules.session_state("s1", "x", A, False)
    assert not rules.session_state("s1", "x", B, True)  # a later copy: the first decided
    assert rules.session_state("s2", "x", B, True)


def test_a_copy_alone_is_decided_as_the_rules_decide_it():
    for run in (True, False):
        for prompt in (True, False):
            rules = CopyRules()
            kept = (
                rules.run_copy("r_ckpt0", A) is None
                if run
                else rules.session_state("s", "x", A, prompt)
            )
            assert kept_alone(run, prompt) == kept
