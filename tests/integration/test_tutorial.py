"""The tutorial's samples, as the page shows them (docs/examples/shop/workflows.py,
included in docs/tutorial.md, and the page's interactive sessions), run against
PostgreSQL."""

import doctest
import re

import pytest

from docs.examples.shop.workflows import order_status, place_order
from tests.support import ROOT, drain

pytestmark = pytest.mark.django_db

TUTORIAL = ROOT / "docs" / "tutorial.md"


def test_tutorial__an_order_runs_its_three_steps_and_returns_its_charge():
    run = place_order(7, "ada@example.com", ["book", "lamp"], 1299)
    assert drain() == ["completed"]
    assert order_status(run.id) == {
        "status": "completed",
        "output": {"charge_id": "ch_7", "reservation": "res-7"},
        "error": None,
    }
    assert list(run.steps.order_by("step_number").values_list("step_name", flat=True)) == [
        "reserve stock",
        "charge card",
        "send receipt",
    ]


def test_tutorial__the_same_order_placed_twice_starts_one_run():
    first = place_order(8, "ada@example.com", ["book"], 500)
    second = place_order(8, "ada@example.com", ["book"], 500)
    assert second.id == first.id


def test_tutorial__an_order_with_nothing_to_charge_fails_without_retries():
    run = place_order(9, "ada@example.com", ["voucher"], 0)
    assert drain() == ["failed"]
    status = order_status(run.id)
    assert status["status"] == "failed" and "nothing to charge" in status["error"]


def test_tutorial__the_pages_sessions_print_what_they_show():
    def order_status_once_run(workflow_id):
        drain()  # what `runworkers` does between the page's two lines
        return order_status(workflow_id)

    sessions = re.findall(r"```pycon\n(.*?)```", TUTORIAL.read_text(), re.DOTALL)
    assert len(sessions) == 2
    for number, session in enumerate(sessions, 1):
        globs = {"place_order": place_order, "order_status": order_status_once_run}
        test = doctest.DocTestParser().get_doctest(session, globs, f"session {number}", str(TUTORIAL), 0)
        runner = doctest.DocTestRunner()
        runner.run(test)
        assert runner.failures == 0, f"the tutorial's session {number} printed something else (see above)"
