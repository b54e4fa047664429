"""Fan-out with real ``runworkers`` processes: ``ctx.start_children`` and
``ctx.wait_for``'s settled wake-up when children end in other processes, with
the worker's batched completion - the two last children of a parent ending at
the same moment in two processes, and children ending while their parent
suspends. No wake-up is lost and none is spent: each parent runs at its start
and once more (or only at its start, where its children ended before it
counted them)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from orchestration import start_workflow
from orchestration.models import Workflow
from tests.acceptance.test_runworkers import wait_for
from tests.support import start_workers
from tests.testapp.models import StepRun

pytestmark = pytest.mark.django_db(transaction=True)


def claims_of_each(ids: list) -> dict:
    """How many times each parent's function ran (``batch`` records a row at each claim)."""
    claimed = StepRun.objects.filter(workflow_id__in=ids, label="batch claimed")
    return {parent: claimed.filter(workflow_id=parent).count() for parent in ids}


def test_two_last_children_ending_at_once_in_two_processes__wake_their_parent_once(workers):
    gate = Path(tempfile.mkdtemp()) / "open"
    parents = [
        start_workflow("batch", {"inputs": [{"gate": str(gate), "n": n} for n in (2, 3)], "child": "opens_at_the_gate"})
        for _ in range(6)
    ]
    ids = [parent.pk for parent in parents]
    workers.extend(start_workers("--concurrency", "7", "--poll-interval", "0.2") for _ in range(2))
    children = Workflow.objects.filter(parent_id__in=ids)
    # Every child held in its step, in one process or the other, and every parent suspended. Twelve
    # children need both processes' seven threads: the first to claim may hold more for a second (claimed
    # ahead, not started), until it gives them back to the other.
    assert wait_for(
        lambda: (
            children.filter(status="running").count() == 12
            and len(set(children.values_list("worker_id", flat=True))) == 2
        ),
        timeout=60,
        interval=0.1,
    ), f"the children ran in both processes: {list(children.values_list('status', 'worker_id'))}"
    assert wait_for(lambda: Workflow.objects.filter(pk__in=ids, status="pending").count() == 6, timeout=30)
    gate.touch()  # all twelve end at once
    assert wait_for(lambda: Workflow.objects.filter(pk__in=ids, status="completed").count() == 6, timeout=60), list(
        Workflow.objects.filter(pk__in=ids).values_list("status", "waiting_for")
    )
    assert {tuple(output) for output in Workflow.objects.filter(pk__in=ids).values_list("output_data", flat=True)} == {
        (4, 9)
    }
    assert set(claims_of_each(ids).values()) == {2}, "each parent: its start, and one wake-up"


@pytest.mark.parametrize("return_exceptions", [False, True])
def test_children_ending_in_other_processes_while_their_parent_suspends__wake_it_at_most_once(
    workers, return_exceptions
):
    # One-step children, claimed by the other threads and process the moment their
    # parent's start commits: they end before, during and after its suspend. With
    # return_exceptions every fourth fails, and the parent still waits for them all.
    inputs = [{"n": n, "fail": return_exceptions and n % 4 == 0} for n in range(8)]
    data = {"inputs": inputs, "child": "square_or_fail", "return_exceptions": return_exceptions}
    ids = [start_workflow("batch", data).pk for _ in range(25)]
    workers.extend(start_workers("--concurrency", "4", "--poll-interval", "0.2") for _ in range(2))
    finished = Workflow.objects.filter(pk__in=ids, status="completed")
    assert wait_for(lambda: finished.count() == 25, timeout=120, interval=0.2), list(
        Workflow.objects.filter(pk__in=ids).exclude(status="completed").values_list("status", "waiting_for")
    )
    expected = [{"failed": "failed"} if item["fail"] else item["n"] ** 2 for item in inputs]
    assert all(output == expected for output in finished.values_list("output_data", flat=True))
    assert Workflow.objects.filter(parent_id__in=ids).count() == 200
    assert set(claims_of_each(ids).values()) <= {1, 2}, "its start, and at most one wake-up"
