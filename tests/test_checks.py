"""The one validation helper (specsim.specs.checks): each check's type and range rule, and the one
message shape "<where>: field 'name' = <value>: expected <what>" (written out here by hand)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from specsim.errors import SpecError
from specsim.specs import checks as C

W = "scenario 's.toml' [engine]"


def message(fn, *args, **kw) -> str:
    with pytest.raises(SpecError) as exc:
        fn(W, "f", *args, **kw)
    return str(exc.value)


def test_integer_names_the_table_the_field_the_value_and_the_rule():
    assert C.integer(W, "f", 5, lo=1, hi=8) == 5
    assert C.integer(W, "f", np.int64(3), lo=1) == 3 and type(C.integer(W, "f", np.int64(3))) is int
    assert message(C.integer, 2.0, lo=1, hi=8, unit="tokens") == \
        "scenario 's.toml' [engine]: field 'f' = 2.0: expected an integer in 1..8 (tokens)"
    assert message(C.integer, True, lo=1) == \
        "scenario 's.toml' [engine]: field 'f' = True: expected an integer in 1..2147483647"
    assert message(C.integer, 9, lo=1, hi=8) == "scenario 's.toml' [engine]: field 'f' = 9: expected at most 8"
    assert message(C.integer, 0, lo=1, hi=8) == "scenario 's.toml' [engine]: field 'f' = 0: expected at least 1"
    assert "at most 2147483647" in message(C.integer, 2 ** 63 - 1)  # an int32 count by default
    C.integer(W, "f", 2 ** 63 - 1, hi=None)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "1", None, [1], True, 10 ** 400])
def test_number_takes_finite_reals_only(value):
    assert "expected a finite number" in message(C.number, value)


def test_number_bounds_open_and_closed():
    assert C.number(W, "f", 0, lo=0.0) == 0.0
    assert message(C.number, 0, lo=0.0, lo_open=True) == "scenario 's.toml' [engine]: field 'f' = 0: expected more than 0"
    assert message(C.number, 1.0, hi=1.0, hi_open=True) == \
        "scenario 's.toml' [engine]: field 'f' = 1.0: expected less than 1"
    assert C.number(W, "f", math.inf, lo=0.0, infinite=True) == math.inf
    assert "or inf (no limit)" in message(C.number, math.nan, infinite=True)


def test_fraction_choice_boolean_text():
    assert C.fraction(W, "f", 1) == 1.0
    assert message(C.fraction, 0.0, lo_open=True) == "scenario 's.toml' [engine]: field 'f' = 0.0: expected a fraction in (0, 1]"
    assert message(C.fraction, 1.0, hi_open=True).endswith("expected a fraction in [0, 1)")
    assert message(C.choice, "b", ("a", "c")).endswith("expected one of 'a', 'c'")
    assert message(C.boolean, "false").endswith("expected true or false (a boolean, not a string or a number)")
    assert message(C.boolean, 0).endswith("expected true or false (a boolean, not a string or a number)")
    assert message(C.text, "  ").endswith("expected a non-empty string")
    assert message(C.text, "a\x00b").endswith("expected a non-empty string")


@pytest.mark.parametrize("name, ok", [("static_k4", True), ("gate.bs-16", True), ("a/b", False), ("..", False),
                                      (".hidden", False), ("", False), ("x" * 65, False), ("é", False)])
def test_file_names(name, ok):
    if ok:
        assert C.file_name(W, "f", name) == name
    else:
        assert "it names output files" in message(C.file_name, name)


def test_lists():
    assert C.integers(W, "f", [1, 2], lo=1) == (1, 2)
    assert C.integers(W, "f", 4, lo=1, scalar_ok=True) == (4,)
    assert message(C.integers, [1, 1], distinct=True).endswith("(each value once)")
    assert message(C.integers, [1, 2.5]) == "scenario 's.toml' [engine]: field 'f' = 2.5: expected integers <= 2147483647"
    assert message(C.integers, [], min_len=1).endswith("expected a list of 1 or more integers <= 2147483647")
    assert C.floats(W, "f", [0.5, 1], lo=0.0, hi=1.0) == (0.5, 1.0)
    assert message(C.floats, [0.5, math.nan], lo=0.0, hi=1.0) == \
        "scenario 's.toml' [engine]: field 'f' = nan: expected finite numbers in [0, 1]"
    assert message(C.floats, [3, 2], increasing=True).endswith("in increasing order")
    assert C.texts(W, "f", ["", "vllm"], empty_ok=True) == ("", "vllm")
    assert message(C.texts, ["a", 1]).endswith("expected non-empty strings")


def test_fields_refuses_unknown_keys_with_the_closest():
    assert C.fields(W, {"a": 1}, ("a", "b")) == {"a": 1}
    with pytest.raises(SpecError, match=r"unknown key 'max_num_seq' \(did you mean 'max_num_seqs'\?\)"):
        C.fields(W, {"max_num_seq": 1}, ("max_num_seqs",))
    with pytest.raises(SpecError, match="expected a table of keys"):
        C.fields(W, [1], ("a",))
