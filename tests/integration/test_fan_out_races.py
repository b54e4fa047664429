"""No wake-up of a waiting parent is lost when its children end at the same
moment, or while the parent is suspending: threads with their own connections
run the children and the parents, as a worker's threads do."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, transaction

from orchestration import start_workflow, waits
from orchestration.claim import claims
from orchestration.models import Workflow
from orchestration.worker import execute
from tests.testapp.models import StepRun
from tests.testapp.workflows import RENDEZVOUS

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def worker_threads(count: int, claim_limit: int = 1) -> Iterator[None]:
    """``count`` threads, each claiming and running runs on its own connection until the block ends."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def work(name: str) -> None:
        try:
            while not stop.is_set():
                runs = claims.claim(name, None, limit=claim_limit)
                for run in runs:
                    execute(run)
                if not runs:
                    time.sleep(0.005)
        except BaseException as exc:  # surfaced in the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(f"racer-{n}",)) for n in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not errors, errors


def until(condition: Callable[[], bool], timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def claims_of_each(parents: list) -> set[int]:
    """The numbers of times each of ``parents`` was claimed."""
    claimed = StepRun.objects.filter(workflow_id__in=parents, label="batch claimed")
    return {claimed.filter(workflow_id=parent).count() for parent in parents}


def test_wait_for__two_last_children_ending_at_once__wake_their_parent_once():
    for round_number in range(10):
        RENDEZVOUS[f"r{round_number}"] = threading.Barrier(2)
    parents = [
        start_workflow("batch", {"inputs": [{"barrier": f"r{n}"}] * 2, "child": "meets_the_others"}) for n in range(10)
    ]
    with worker_threads(4):
        assert until(lambda: not Workflow.objects.filter(pk__in=[p.pk for p in parents], status="pending").exists())
    assert set(Workflow.objects.filter(pk__in=[p.pk for p in parents]).values_list("status", flat=True)) == {
        "completed"
    }
    assert claims_of_each([p.pk for p in parents]) == {2}, "each parent: its start, and one wake-up"


def test_wait_for__children_ending_while_their_parent_suspends__wake_it_once():
    # Children of one-step runs, claimed by other threads the moment their
    # parent's start commits: they end before, during and after its suspend.
    parents = [start_workflow("batch", {"inputs": [{"n": n} for n in range(8)]}) for _ in range(25)]
    ids = [parent.pk for parent in parents]
    with worker_threads(6):
        assert until(lambda: Workflow.objects.filter(pk__in=ids, status="completed").count() == len(ids)), list(
            Workflow.objects.filter(pk__in=ids).exclude(status="completed").values_list("waiting_for", flat=True)
        )
    # Its start, and one wake-up; or its start only, where every child ended before it read them.
    assert claims_of_each(ids) <= {1, 2}


# -- each race made to happen: two threads, one held inside its transaction --------------


def claimed_family(children: int) -> tuple[Workflow, Any, list[Any]]:
    """A parent of ``children`` one-step children, claimed again to wait for
    them (held, as its worker holds it), and its children claimed too."""
    parent = start_workflow("batch", {"inputs": [{"n": n} for n in range(children)]})
    assert execute(claims.claim("parent", None)[0]) == "waiting"
    kids = list(Workflow.objects.filter(parent=parent).order_by("pk"))
    held = claims.claim("children", None, limit=children)
    Workflow.objects.filter(pk=parent.pk).update(run_after=None)
    (run,) = claims.claim("parent", None)
    assert {lease.id for lease in held} == {kid.pk for kid in kids}
    return parent, run, held


def suspend(run: Any, children: list[Any]) -> None:
    """What ``ctx.wait_for`` has its worker do for a wait not settled yet."""
    wait = waits.ChildrenWait(run.id, 2, [child.id for child in children], wake_on_failure=True)
    run.suspend(None, waits.Wait.children(0, len(children)), wait.ready, wait.arm)


def in_threads(*bodies: Callable[[], None]) -> None:
    errors: list[BaseException] = []

    def body_of(body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except BaseException as exc:
                errors.append(exc)
            finally:
                connection.close()

        return run

    threads = [threading.Thread(target=body_of(body)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors


def woken(parent: Workflow) -> bool:
    parent.refresh_from_db()
    return parent.status == "pending" and parent.run_after is None


def test_wait_for__a_child_ending_as_its_parent_suspends__its_end_committed_first__wakes_it():
    parent, run, (child,) = claimed_family(1)
    ended = threading.Event()

    def end_child() -> None:
        with transaction.atomic():
            child.complete(1)
            ended.set()
            time.sleep(0.3)  # the parent's suspend waits here, at the child's row

    def suspend_parent() -> None:
        ended.wait(10)
        suspend(run, [child])

    in_threads(end_child, suspend_parent)
    assert woken(parent)


def test_wait_for__a_child_ending_as_its_parent_suspends__the_suspend_committed_first__wakes_it():
    parent, run, (child,) = claimed_family(1)
    suspended = threading.Event()

    def suspend_parent() -> None:
        with transaction.atomic():
            suspend(run, [child])
            suspended.set()
            time.sleep(0.3)  # the child's end waits here, at its own row, which the wait marked

    def end_child() -> None:
        suspended.wait(10)
        child.complete(1)

    in_threads(suspend_parent, end_child)
    assert woken(parent)


def test_wait_for__its_two_last_children_ending_at_once__wake_it():
    parent, run, children = claimed_family(2)
    suspend(run, children)
    assert not woken(parent)
    together = threading.Barrier(2)

    def end(child: Any) -> Callable[[], None]:
        def body() -> None:
            together.wait(10)
            with transaction.atomic():
                child.complete(1)
                time.sleep(0.3)  # the other's count of the wait waits here

        return body

    in_threads(*(end(child) for child in children))
    assert woken(parent)
