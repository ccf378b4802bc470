"""Which folder names may become run partition keys, and the rule a bad one breaks."""

from __future__ import annotations

import pytest

from statepool_dagster.core.names import check_run_name, run_name_problem


@pytest.mark.parametrize(
    "name",
    ["run000", "a", "Run-7_b.v2", "2024-06-01_ovo", "x" * 200, "a..b", "trailing.", "-dash"],
)
def test_allowed_run_names_have_no_problem(name):
    assert run_name_problem(name) is None
    assert check_run_name(name) == name


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("..", "starts with a dot"),
        (".", "starts with a dot"),
        (".hidden", "starts with a dot"),
        ("a/b", "characters outside [A-Za-z0-9._-]: '/'"),
        ("../escape", "starts with a dot"),
        ("c,d", "characters outside [A-Za-z0-9._-]: ','"),
        ("a b", "characters outside [A-Za-z0-9._-]: ' '"),
        ("x\n", "characters outside [A-Za-z0-9._-]: '\\n'"),
        ("\x00", "characters outside [A-Za-z0-9._-]: '\\x00'"),
        ("a\\b", "characters outside [A-Za-z0-9._-]: '\\\\'"),
        ("x" * 201, "longer than 200 characters"),
        ("runＡ", "characters outside [A-Za-z0-9._-]: 'Ａ'"),  # fullwidth A
        ("run\u0430", "characters outside [A-Za-z0-9._-]: '\u0430'"),  # Cyrillic a
        ("", "empty name"),
    ],
)
def test_hostile_run_names_are_rejected_naming_the_rule(name, rule):
    assert run_name_problem(name) == rule
    with pytest.raises(ValueError) as err:
        check_run_name(name)
    assert rule in str(err.value)
