"""A value PostgreSQL refuses (a NUL character, a lone surrogate, JSON nested
deeper than Python encodes) fails its step at once, naming the step and the
problem: the run is never left ``running`` to be reclaimed as if its worker
had crashed. Run by a real worker: its threads, connections and outcomes."""

from __future__ import annotations

from typing import Any

import pytest

from orchestration import start_workflow, workflow
from orchestration.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from orchestration.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@workflow("fi_returns", max_retries=0)
def returns(ctx: Any, kind: str) -> Any:
    values = {"lone surrogate": "\ud800", "deep": nested(100_000)}
    return ctx.step(kind, lambda: values[kind])


class WithText(Exception):
    pass


#: What the workflows below are asked for by name: their inputs, being JSON, cannot hold them.
REFUSED = {"nul": "bad \x00 byte", "surrogate": "half \udc80 pair", "nul name": "bad\x00name"}


@workflow("fi_raises", max_retries=0)
def raises(ctx: Any, text: str) -> Any:
    def fail() -> None:
        raise WithText(REFUSED[text])

    return ctx.step("says", fail)


@workflow("fi_named", max_retries=0)
def named(ctx: Any, name: str) -> Any:
    return ctx.step(REFUSED[name], lambda: 1)


@workflow("fi_awaits", max_retries=0)
def awaits(ctx: Any, name: str) -> Any:
    return ctx.wait_for_event(REFUSED[name])


def run_to_the_end(workflow_type: str, data: Any) -> Workflow:
    run = start_workflow(workflow_type, data)
    Worker(concurrency=1, burst=True, listen=False).run()
    return Workflow.objects.get(pk=run.pk)


def steps_running(run: Workflow) -> list[int]:
    return list(
        WorkflowStep.objects.filter(workflow=run, status=StepStatus.RUNNING).values_list("step_number", flat=True)
    )


@pytest.mark.parametrize(("kind", "problem"), [("lone surrogate", "lone surrogate"), ("deep", "nested too deeply")])
def test_step_result_postgres_refuses__fails_the_step_at_once_naming_it_and_the_problem(kind, problem):
    run = run_to_the_end("fi_returns", kind)
    assert run.status == WorkflowStatus.FAILED, run.error_message
    assert f'Step 1 "{kind}"' in run.error_message and problem in run.error_message
    step = WorkflowStep.objects.get(workflow=run, step_number=1)
    assert step.status == StepStatus.FAILED and problem in step.error_message


@pytest.mark.parametrize(("text", "stored"), [("nul", "bad \\x00 byte"), ("surrogate", "half \\udc80 pair")])
def test_step_error_text_postgres_refuses__is_stored_escaped_and_the_run_fails(text, stored):
    run = run_to_the_end("fi_raises", text)
    assert run.status == WorkflowStatus.FAILED and stored in run.error_message
    assert stored in WorkflowStep.objects.get(workflow=run, step_number=1).error_message
    assert not steps_running(run)


def test_step_name_with_a_nul__fails_the_run_at_once_naming_the_problem():
    run = run_to_the_end("fi_named", "nul name")
    assert run.status == WorkflowStatus.FAILED and "NUL character" in run.error_message
    assert not steps_running(run)


def test_event_name_with_a_nul__fails_the_run_at_once_naming_the_problem():
    run = run_to_the_end("fi_awaits", "nul name")
    assert run.status == WorkflowStatus.FAILED and "NUL character" in run.error_message
    assert not steps_running(run)
