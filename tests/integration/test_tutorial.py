"""The tutorial's samples, as the page shows them (docs/examples/shop/workflows.py,
included in docs/tutorial.md, and the page's interactive sessions), run against
PostgreSQL."""

import doctest
import re
import sys
import threading
import time

import pytest
from django.db import connection

import docs.examples.shop as examples_shop
import docs.examples.shop.workflows as shop_workflows
from docs.examples.shop.workflows import order_status, place_order
from orchestration import retry_workflow
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


def test_tutorial__an_order_during_the_providers_outage_fails_after_its_retries_and_a_retry_completes_it(
    monkeypatch,
):
    monkeypatch.setenv("SHOP_PAYMENTS_DOWN", "1")
    run = place_order(9, "ada@example.com", ["lamp"], 2500)
    assert drain() == ["retrying"] * 3 + ["failed"]
    assert "ConnectionError: payment provider unreachable" in order_status(run.id)["error"]
    monkeypatch.delenv("SHOP_PAYMENTS_DOWN")
    retry_workflow(run)
    assert drain() == ["completed"]
    assert order_status(run.id)["output"] == {"charge_id": "ch_9", "reservation": "res-9"}


class Worker:
    """``runworkers`` for the page's sessions: a thread that runs what is due,
    retries at once, in a connection of its own, as the page's worker would."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.work)

    def work(self) -> None:
        try:
            while not self.stop.is_set():
                drain()
                time.sleep(0.05)
        finally:
            connection.close()

    def __enter__(self) -> "Worker":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.mark.django_db(transaction=True)
def test_tutorial__the_pages_sessions_run_literally_and_print_what_they_show(monkeypatch):
    # ``from shop.workflows import ...`` as in the reader's project, where the app is ``shop``.
    monkeypatch.setitem(sys.modules, "shop", examples_shop)
    monkeypatch.setitem(sys.modules, "shop.workflows", shop_workflows)
    sessions = re.findall(r"```pycon\n(.*?)```", TUTORIAL.read_text(), re.DOTALL)
    assert len(sessions) == 3
    globs: dict = {}
    with Worker():
        for number, session in enumerate(sessions, 1):
            if number == 2:  # §6: the worker started again with SHOP_PAYMENTS_DOWN=1
                monkeypatch.setenv("SHOP_PAYMENTS_DOWN", "1")
            if number == 3:  # the outage over, the worker as in §5, and the admin's Retry pressed
                monkeypatch.delenv("SHOP_PAYMENTS_DOWN")
                retry_workflow(globs["run"])
            test = doctest.DocTestParser().get_doctest(session, globs, f"session {number}", str(TUTORIAL), 0)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
            runner.run(test, clear_globs=False)
            globs = test.globs  # the shell goes on: its names and its run
            assert runner.failures == 0, f"the tutorial's session {number} printed something else (see above)"
