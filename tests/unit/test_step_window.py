"""Which of a run's steps a page shows: the ranges of the window, and the range an operator asks for."""

from __future__ import annotations

import pytest

from orchestration.reports import step_window
from orchestration.reports.step_window import InvalidRange, parse_range, shown_ranges


def test_step_window_module_examples_hold():
    import doctest

    assert doctest.testmod(step_window).failed == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("40:60", (40, 60)),
        ("40-60", (40, 60)),
        (" 40 : 60 ", (40, 60)),
        ("7", (7, 7 + step_window.PAGE - 1)),
        ("9000:", (9000, None)),
        (":20", (1, 20)),
        ("5:5", (5, 5)),
    ],
)
def test_parse_range__reads_a_step_a_range_or_an_open_end(text, expected):
    assert parse_range(text) == expected


@pytest.mark.parametrize("text", ["", ":", "ten", "0", "0:5", "60:40", "1:2:3", "4.5"])
def test_parse_range__refuses_what_is_no_range_of_steps(text):
    with pytest.raises(InvalidRange):
        parse_range(text)


def test_shown_ranges__of_a_run_with_no_step_are_none():
    assert shown_ranges(0, 1, (1, 10)) == ([], None)


def test_shown_ranges__of_a_short_run_are_all_of_it():
    assert shown_ranges(step_window.WHOLE_UP_TO, 3, None) == ([(1, step_window.WHOLE_UP_TO)], None)


def test_shown_ranges__of_a_long_run_are_its_head_its_tail_and_the_step_it_is_at():
    assert shown_ranges(20_000, 7_001, None) == ([(1, 10), (7_001, 7_001), (19_991, 20_000)], None)


def test_shown_ranges__merge_what_touches():
    ranges, asked = shown_ranges(20_000, 11, (12, 100))
    assert ranges == [(1, 100), (19_991, 20_000)] and asked == (12, 100)


def test_shown_ranges__cut_a_wide_range_to_a_page_of_the_most_steps():
    _, asked = shown_ranges(20_000, None, (1_000, None))
    assert asked == (1_000, 1_000 + step_window.MOST_ASKED - 1)
    assert shown_ranges(20_000, None, (1_000, None), most=None)[1] == (1_000, 20_000)


def test_shown_ranges__cut_a_range_past_the_last_step_to_it():
    assert shown_ranges(100, None, (95, 120))[1] == (95, 100)
    assert shown_ranges(100, None, (150, 160)) == ([(1, 10), (91, 100)], None)
