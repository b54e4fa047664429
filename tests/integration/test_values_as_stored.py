"""What a workflow receives reads the same on its first attempt as on every
replay: the value as jsonb stores it (keys shorter first, numbers as
``numeric`` prints them), not as the step returned it in Python."""

from __future__ import annotations

import json
import random
import uuid
from collections import defaultdict
from typing import Any

import pytest

from orchestration import aget_result, send_event, start_workflow, wait_for_result, workflow
from orchestration.models import Workflow, WorkflowStep
from tests.support import drain, run_async
from tests.testapp.models import StepRun

#: What jsonb gives back otherwise than Python wrote it: key order, a key
#: written twice, floats past 1e16 and a negative zero.
AWKWARD = {
    "zeta": 1,
    "b": [1e16, -0.0, 1.5e-07, 2.5, 1.2345678901234567e20],
    "aa": {"yy": -1e16, "x": 0.1},
    "é": "two bytes",
    1: "written as the key '1'",
    "1": "written twice: the last one is kept",
}

#: Every value each run received from the engine, attempt after attempt.
received: dict[uuid.UUID, list[Any]] = defaultdict(list)


def as_text(value: Any) -> str:
    """The value's JSON, which tells apart what ``==`` does not: key order, 1e16 and 10**16, -0.0 and 0.0."""
    return json.dumps(value)


def first_received(run: Workflow) -> Any:
    return received[run.pk][0]


def stored_output(run: Workflow, step_number: int) -> Any:
    return WorkflowStep.objects.get(workflow=run, step_number=step_number).output_data


def charge(ctx: Any, item: str) -> dict[str, str]:
    StepRun.objects.create(workflow_id=ctx.workflow_id, step_number=0, label=f"charge {item}", pid=0)
    return {"charged": item}


def fail_on_first_attempt(ctx: Any) -> None:
    if ctx.attempt == 1:
        raise ConnectionError("the carrier timed out")


@workflow("values_loop_over_a_dict", max_retries=1)
def loop_over_a_dict(ctx: Any, data: Any) -> Any:
    lines = ctx.step("quote", lambda: {"shipping": 5, "tax": 2, "item": 10})
    for item in lines:
        ctx.step(f"charge {item}", charge, ctx, item)
    ctx.step("book the carrier", fail_on_first_attempt, ctx)
    return list(lines)


@workflow("values_from_a_step", max_retries=0)
def from_a_step(ctx: Any, data: Any) -> Any:
    received[ctx.workflow_id].append(ctx.step("awkward", lambda: AWKWARD))
    received[ctx.workflow_id].append(ctx.step("a float", lambda: 1e16))


@workflow("values_from_an_atomic_step", max_retries=0)
def from_an_atomic_step(ctx: Any, data: Any) -> Any:
    received[ctx.workflow_id].append(ctx.atomic_step("awkward", lambda: AWKWARD))


async def awkward_later() -> Any:
    return AWKWARD


@workflow("values_from_an_async_step", max_retries=0)
async def from_an_async_step(ctx: Any, data: Any) -> Any:
    received[ctx.workflow_id].append(await ctx.step("awkward", awkward_later))
    received[ctx.workflow_id].append(await ctx.step("awkward, sync", lambda: AWKWARD))


@workflow("values_from_an_event", max_retries=0)
def from_an_event(ctx: Any, data: Any) -> Any:
    received[ctx.workflow_id].append(ctx.wait_for_event("quote"))


@workflow("values_awkward_child", max_retries=0)
def awkward_child(ctx: Any, data: Any) -> Any:
    return AWKWARD


@workflow("values_from_a_child", max_retries=0)
def from_a_child(ctx: Any, data: Any) -> Any:
    (output,) = ctx.wait_for([ctx.start_child("values_awkward_child")])
    received[ctx.workflow_id].append(output)


@workflow("values_returns_awkward", max_retries=0)
def returns_awkward(ctx: Any, data: Any) -> Any:
    return AWKWARD


@pytest.mark.django_db
def test_step__a_workflow_looping_over_a_dict_a_step_returned_survives_a_retry():
    run = start_workflow("values_loop_over_a_dict")
    assert drain() == ["retrying", "completed"]
    run.refresh_from_db()
    assert run.status == "completed", run.error_message
    assert run.output_data == ["tax", "item", "shipping"]  # jsonb's order, on both attempts
    charged = StepRun.objects.filter(workflow_id=run.pk).values_list("label", flat=True)
    assert sorted(charged) == ["charge item", "charge shipping", "charge tax"]  # each once


@pytest.mark.django_db
def test_step__its_first_attempt_receives_the_output_as_stored():
    run = start_workflow("values_from_a_step")
    assert drain() == ["completed"]
    awkward, a_float = received[run.pk]
    assert as_text(awkward) == as_text(stored_output(run, 1))
    assert as_text(a_float) == as_text(stored_output(run, 2)) == "10000000000000000"


@pytest.mark.django_db
def test_atomic_step__its_first_attempt_receives_the_output_as_stored():
    run = start_workflow("values_from_an_atomic_step")
    assert drain() == ["completed"]
    assert as_text(first_received(run)) == as_text(stored_output(run, 1))


@pytest.mark.django_db
def test_async_step__its_first_attempt_receives_the_output_as_stored():
    run = start_workflow("values_from_an_async_step")
    assert drain() == ["completed"]
    from_async_body, from_sync_body = received[run.pk]
    assert as_text(from_async_body) == as_text(stored_output(run, 1))
    assert as_text(from_sync_body) == as_text(stored_output(run, 2))


@pytest.mark.django_db
@pytest.mark.parametrize("sent", ["before the wait", "during the wait"])
def test_wait_for_event__receives_the_payload_as_stored(sent):
    run = start_workflow("values_from_an_event")
    if sent == "before the wait":
        send_event(run, "quote", AWKWARD)
        assert drain() == ["completed"]
    else:
        assert drain() == ["waiting"]
        send_event(run, "quote", AWKWARD)
        assert drain() == ["completed"]
    assert as_text(first_received(run)) == as_text(stored_output(run, 1)["payload"])


@pytest.mark.django_db
def test_wait_for__receives_the_childs_output_as_stored():
    run = start_workflow("values_from_a_child")
    assert drain() == ["waiting", "completed", "completed"]
    child = Workflow.objects.get(parent=run)
    assert as_text(first_received(run)) == as_text(child.output_data)


@pytest.mark.django_db(transaction=True)
def test_wait_for_result__returns_the_output_as_stored():
    run = start_workflow("values_returns_awkward")
    assert drain() == ["completed"]
    stored = Workflow.objects.get(pk=run.pk).output_data
    assert as_text(wait_for_result(run, timeout=5)) == as_text(stored)
    assert as_text(run_async(aget_result(run, timeout=5))) == as_text(stored)


@pytest.mark.django_db
def test_step__the_values_jsonb_changes_read_back_as_postgresql_prints_them():
    run = start_workflow("values_from_a_step")
    assert drain() == ["completed"]
    assert as_text(first_received(run)) == (
        '{"1": "written twice: the last one is kept", "b": [10000000000000000, 0.0, 1.5e-07, 2.5, '
        '123456789012345670000], "aa": {"x": 0.1, "yy": -10000000000000000}, "\\u00e9": "two bytes", "zeta": 1}'
    )


def random_values(count: int) -> list[Any]:
    """Objects with keys of one to four characters of every UTF-8 width, and
    floats of every magnitude a float has, of either sign."""
    rng = random.Random(38)
    alphabet = "abAB_1-é€\U0001f600"
    values = []
    for _ in range(count):
        floats = [rng.choice((-1, 1)) * rng.random() * 10.0 ** rng.randint(-320, 300) for _ in range(8)]
        keys = {"".join(rng.choices(alphabet, k=rng.randint(1, 4))) for _ in range(8)}
        values.append({key: floats[n % len(floats)] for n, key in enumerate(keys)} | {"ints": [-0.0, 1e22, 5e-324]})
    return values


RANDOM_VALUES = random_values(200)


@workflow("values_random", max_retries=0)
def random_outputs(ctx: Any, data: Any) -> Any:
    for n, value in enumerate(RANDOM_VALUES):
        received[ctx.workflow_id].append(ctx.step(f"value {n}", lambda value=value: value))


@pytest.mark.django_db
def test_step__its_first_attempt_receives_any_object_as_stored():
    run = start_workflow("values_random")
    assert drain() == ["completed"]
    rows = WorkflowStep.objects.filter(workflow=run).order_by("step_number").values_list("output_data", flat=True)
    assert [as_text(value) for value in received[run.pk]] == [as_text(value) for value in rows]
