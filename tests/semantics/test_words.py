"""Scope names as compact and recall compare them (`words.name_words`)."""
from __future__ import annotations

import pytest

from git_whetstone.semantics.words import name_words


@pytest.mark.parametrize("one, two", [("currency formatting", "Currency-formatting"), ("column widths", "widths: column"),
                                      ("level two", "level 2"), ("tables/charts", "charts, tables"),
                                      ("(email) tone", "email tone")])
def test_spellings_of_one_name_are_one_name(one: str, two: str) -> None:
    assert name_words(one) == name_words(two)


@pytest.mark.parametrize("one, two", [("c++ style", "c# style"), ("??", "&&"), ("light theme", "dark theme"),
                                      ("level 1", "level 2"), ("no emoji", "emoji"), ("c++ style", "c style")])
def test_names_that_differ_by_a_value_or_a_symbol_stay_apart(one: str, two: str) -> None:
    assert name_words(one) != name_words(two)
