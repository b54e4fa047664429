"""Stored text printed on a terminal or in a log line: control characters escaped."""

from __future__ import annotations

import doctest

import pytest

from orchestration import terminal
from orchestration.terminal import printable


def test_doctests__hold():
    assert doctest.testmod(terminal).failed == 0


@pytest.mark.parametrize("code", [*range(0x20), 0x7F, *range(0x80, 0xA0)])
def test_printable__escapes_every_c0_and_c1_control_character_and_del(code):
    assert printable(f"a{chr(code)}b") in (f"a\\x{code:02x}b", "a\\tb", "a\\nb", "a\\rb")


def test_printable__keeps_newlines_only_when_asked_and_leaves_other_text_alone():
    assert printable("line 1\nline 2", newlines=True) == "line 1\nline 2"
    assert printable("line 1\nline 2") == "line 1\\nline 2"
    assert printable("café — 東京 ✓") == "café — 東京 ✓"
