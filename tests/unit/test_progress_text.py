"""How a run's progress is said in a line and drawn as a bar (the CLI and the admin)."""

from __future__ import annotations

import pytest

from orchestration.reports.listing import progress_fraction, progress_text


@pytest.mark.parametrize(
    ("progress", "fraction"),
    [
        ({"done": 40, "total": 100}, 0.4),
        ({"done": 1.5, "total": 3}, 0.5),
        ({"done": 150, "total": 100}, 1.0),  # past its total: a full bar, not a broken one
        ({"done": -1, "total": 100}, 0.0),
        ({"done": 1, "total": 0}, None),
        ({"done": True, "total": 2}, None),  # a bool is not a count
        ({"done": "40", "total": 100}, None),
        ({"message": "warming up"}, None),
        (None, None),
    ],
)
def test_progress_fraction__only_where_done_and_total_are_numbers(progress, fraction):
    assert progress_fraction(progress) == fraction


def test_progress_text__says_the_counts_and_the_message():
    assert progress_text({"done": 40, "total": 100, "message": "resizing"}) == "40 of 100 (40%): resizing"
    assert progress_text({"done": 2, "total": 3}) == "2 of 3 (67%)"
    assert progress_text({"message": "warming up"}) == "warming up"
    assert progress_text({"phase": 2}) == '{"phase": 2}'
