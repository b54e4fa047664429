"""Instrumented workflows for the tests. Every step body records a StepRun."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

from django.db import connection
from pydantic import BaseModel

from orchestration import ChildWorkflowFailed, EventTimeout, PermanentError, pause_workflow, workflow
from orchestration.observability import observe

from .models import LedgerEntry, StepRun


def record(ctx: Any, step_number: int, label: str, result: Any = None, sleep: float = 0) -> Any:
    StepRun.objects.create(workflow_id=ctx.workflow_id, step_number=step_number, label=label, pid=os.getpid())
    if sleep:
        time.sleep(sleep)
    return result if result is not None else {"step": step_number, "label": label}


@workflow("three_steps")
def three_steps(ctx: Any, data: Any) -> Any:
    sleep = (data or {}).get("sleep", 0)
    first = ctx.step("first", record, ctx, 1, "first", None, sleep)
    second = ctx.step("second", record, ctx, 2, "second", None, sleep)
    third = ctx.step("third", record, ctx, 3, "third", None, sleep)
    return {"steps": [first["step"], second["step"], third["step"]], "input": data}


def fail_until(ctx: Any, succeed_on: int) -> dict[str, int]:
    record(ctx, 2, "flaky")
    if ctx.attempt < succeed_on:
        raise ConnectionError(f"flaky failure on attempt {ctx.attempt}")
    return {"attempt": ctx.attempt}


@workflow("flaky", max_retries=5)
def flaky(ctx: Any, data: dict[str, int]) -> Any:
    ctx.step("prepare", record, ctx, 1, "prepare")
    return ctx.step("flaky call", fail_until, ctx, data["succeed_on"])


def always_raise(ctx: Any) -> None:
    record(ctx, 1, "boom")
    raise ValueError("boom")


@workflow("always_fails", max_retries=2)
def always_fails(ctx: Any, data: Any) -> Any:
    return ctx.step("boom", always_raise, ctx)


def raise_permanent(ctx: Any) -> None:
    record(ctx, 1, "permanent")
    raise PermanentError("card declined")


@workflow("permanent_failure", max_retries=5)
def permanent_failure(ctx: Any, data: Any) -> Any:
    return ctx.step("charge", raise_permanent, ctx)


@workflow("non_json_step", max_retries=5)
def non_json_step(ctx: Any, data: Any) -> Any:
    return ctx.step("returns a set", lambda: {1, 2, 3})


@workflow("non_json_output", max_retries=5)
def non_json_output(ctx: Any, data: Any) -> Any:
    return object()


@workflow("changes_its_steps", max_retries=3)
def changes_its_steps(ctx: Any, data: Any) -> Any:
    ctx.step(f"first (attempt {ctx.attempt})", record, ctx, 1, "first")
    ctx.step("fail once", fail_until, ctx, 2)


@workflow("echo", queue="default")
def echo(ctx: Any, data: Any) -> Any:
    return ctx.step("echo", lambda: data)


@workflow("on_other_queue", queue="other", priority=5)
def on_other_queue(ctx: Any, data: Any) -> Any:
    return ctx.step("echo", lambda: data)


@workflow("slow", max_retries=3)
def slow(ctx: Any, data: dict[str, float]) -> Any:
    for number in range(1, data.get("steps", 3) + 1):
        ctx.step(f"slow {number}", record, ctx, number, f"slow {number}", None, data["seconds"])
    return {"done": True}


def kill_own_process() -> None:
    os._exit(17)  # as a segfault or the OOM killer would: no cleanup, no exception


@workflow("crashes_worker", max_retries=20)
def crashes_worker(ctx: Any, data: Any) -> Any:
    ctx.step("fine", record, ctx, 1, "fine")
    return ctx.step("kill the process", kill_own_process)


# -- waiting primitives --------------------------------------------------------


@workflow("sleeper")
def sleeper(ctx: Any, data: dict[str, float]) -> Any:
    ctx.step("before", record, ctx, 1, "before")
    ctx.sleep("nap", data["seconds"])
    ctx.step("after", record, ctx, 3, "after")
    return {"slept": data["seconds"]}


@workflow("awaits_approval", max_retries=0)
def awaits_approval(ctx: Any, data: Any) -> Any:
    decision = ctx.wait_for_event("approval", timeout=(data or {}).get("timeout"))
    return ctx.step("apply decision", lambda: {"decision": decision})


@workflow("square")
def square(ctx: Any, data: dict[str, int]) -> Any:
    return ctx.step("square", lambda: data["n"] * data["n"])


@workflow("fan_out", max_retries=0)
def fan_out(ctx: Any, data: dict[str, Any]) -> Any:
    """Start ``children`` children of type ``child`` (input ``{"n": n, **child_input}``,
    options ``child_options``), then wait for them all."""
    child, extra, options = data.get("child", "square"), data.get("child_input", {}), data.get("child_options", {})
    children = [ctx.start_child(child, {"n": n, **extra}, **options) for n in range(data["children"])]
    return ctx.wait_for(children)


@workflow("batch", max_retries=0)
def batch(ctx: Any, data: dict[str, Any]) -> Any:
    """A child of type ``child`` per item of ``inputs`` (``ctx.start_children``, with
    ``options``), waited for with ``return_exceptions`` as given; returns each
    outcome, a failure as ``{"failed": its status}``. Each claim of it adds a
    ``StepRun`` labelled "batch claimed" (not a step: a replay adds one too)."""
    StepRun.objects.create(workflow_id=ctx.workflow_id, step_number=0, label="batch claimed", pid=os.getpid())
    handles = ctx.start_children(data.get("child", "square"), data["inputs"], **data.get("options", {}))
    outcomes = ctx.wait_for(handles, return_exceptions=data.get("return_exceptions", False))
    return [{"failed": outcome.status} if isinstance(outcome, ChildWorkflowFailed) else outcome for outcome in outcomes]


@workflow("square_or_fail", max_retries=0)
def square_or_fail(ctx: Any, data: dict[str, Any]) -> Any:
    """``square``, or a permanent failure where the input says ``"fail": true``."""
    if data.get("fail"):
        return ctx.step("square", raise_permanent, ctx)
    return ctx.step("square", lambda: data["n"] * data["n"])


#: Barriers by name, for ``meets_the_others``: set up by a test whose threads run the children.
RENDEZVOUS: dict[str, threading.Barrier] = {}


@workflow("meets_the_others", max_retries=0)
def meets_the_others(ctx: Any, data: dict[str, Any]) -> Any:
    """A step that returns once every party of ``RENDEZVOUS[data["barrier"]]`` reached it:
    children that end at the same moment."""
    return ctx.step("meet", lambda: RENDEZVOUS[data["barrier"]].wait(timeout=20))


def wait_for_gate(gate: str, n: int) -> int:
    from pathlib import Path

    deadline = time.monotonic() + 60
    while not Path(gate).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the gate {gate} was never opened")
        time.sleep(0.002)
    return n * n


@workflow("opens_at_the_gate", max_retries=0)
def opens_at_the_gate(ctx: Any, data: dict[str, Any]) -> Any:
    """A step that returns ``n * n`` once the file ``data["gate"]`` exists: children in
    worker processes that all end at the same moment once a test creates it."""
    return ctx.step("through the gate", wait_for_gate, data["gate"], data["n"])


@workflow("waits_for_one_child_twice", max_retries=0)
def waits_for_one_child_twice(ctx: Any, data: Any) -> Any:
    child = ctx.start_child("square", {"n": 3})
    return ctx.wait_for([child, child])


def book_entry(ctx: Any, amount: int, marker: str | None) -> dict[str, int]:
    from pathlib import Path

    LedgerEntry.objects.create(workflow_id=ctx.workflow_id, amount=amount)
    if marker and ctx.attempt == 1:
        Path(marker).write_text(str(os.getpid()))  # "my write is done, kill me now"
        time.sleep(30)
    return {"booked": amount}


@workflow("books_once", max_retries=3)
def books_once(ctx: Any, data: dict[str, Any]) -> Any:
    return ctx.atomic_step("book", book_entry, ctx, data["amount"], data.get("marker"))


def book_then_fail(ctx: Any) -> None:
    LedgerEntry.objects.create(workflow_id=ctx.workflow_id, amount=1)
    raise ValueError("failed after writing")


@workflow("atomic_fails", max_retries=0)
def atomic_fails(ctx: Any, data: Any) -> Any:
    return ctx.atomic_step("book then fail", book_then_fail, ctx)


@workflow("scheduled_tick", schedule="* * * * * */2")
def scheduled_tick(ctx: Any, data: Any) -> Any:
    return ctx.step("tick", lambda: data)


@workflow("naps_briefly", max_retries=0)
def naps_briefly(ctx: Any, data: dict[str, float]) -> Any:
    """How long ``ctx.sleep(seconds)`` lasted, in seconds of the worker's monotonic clock."""
    began = ctx.step("began", time.monotonic)
    ctx.sleep("nap", data["seconds"])
    return ctx.step("woke", time.monotonic) - began


@workflow("waits_briefly_for_an_event", max_retries=0)
def waits_briefly_for_an_event(ctx: Any, data: dict[str, float]) -> Any:
    """How long ``ctx.wait_for_event(timeout=seconds)`` waited before it timed out."""
    began = ctx.step("began", time.monotonic)
    with contextlib.suppress(EventTimeout):
        ctx.wait_for_event("never sent", timeout=data["seconds"])
    return ctx.step("gave up", time.monotonic) - began


@workflow("monthly_bill", schedule="0 0 1 * *")
def monthly_bill(ctx: Any, data: Any) -> Any:
    """A tick that is always in the past: its run is started as soon as a scheduler runs."""
    return ctx.step("charge", lambda: data)


def fail_the_first_time(ctx: Any, decision: Any) -> dict[str, Any]:
    first = not StepRun.objects.filter(workflow_id=ctx.workflow_id, label="act").exists()
    record(ctx, 2, "act")
    if first:
        raise PermanentError("not yet")
    return {"acted_on": decision}


@workflow("acts_on_approval", max_retries=0)
def acts_on_approval(ctx: Any, data: Any) -> Any:
    """Waits for an approval, then acts on it; the act fails the first time it runs."""
    decision = ctx.wait_for_event("approval")
    return ctx.step("act", fail_the_first_time, ctx, decision)


from . import async_workflows, endings  # noqa: E402, F401  (async workflows; the fault-injection suite's)

# -- flow control (tests/acceptance/test_flow_control_processes.py) -------------------


@workflow("flow_hold", queue="flow", max_retries=0, concurrency_key=lambda data: data.get("key"))
def flow_hold(ctx: Any, data: dict[str, Any]) -> Any:
    """Holds its worker thread for ``seconds`` in one step."""
    return ctx.step("hold", time.sleep, data.get("seconds", 0))


@workflow("flow_naps", queue="flow", max_retries=0)
def flow_naps(ctx: Any, data: dict[str, float]) -> Any:
    ctx.sleep("nap", data["seconds"])
    return ctx.step("after", lambda: "woke")


@workflow("versioned", max_retries=0)
def versioned(ctx: Any, data: Any) -> Any:
    """Deployed in versions (TESTAPP_CODE_VERSION): 2 adds patch "charge-v2" around
    the charge, 3 keeps only its new branch. ``wait_first``: a timer before it."""
    version = os.environ.get("TESTAPP_CODE_VERSION", "1")
    if data.get("wait_first"):
        ctx.sleep("wait first", data["wait_first"])
    if version == "3":
        ctx.deprecate_patch("charge-v2")
    new = version == "3" or (version == "2" and ctx.patched("charge-v2"))
    label = "charge v2" if new else "charge"
    charged = ctx.step(label, record, ctx, 1, label)
    ctx.sleep("settle", data.get("settle", 0))
    ctx.step("ship", record, ctx, 3, "ship")
    return charged["label"]


if not os.environ.get("TESTAPP_OLD_CODE"):  # a worker of the code before the deploy does not register it

    @workflow("added_in_a_deploy", max_retries=0)
    def added_in_a_deploy(ctx: Any, data: Any) -> Any:
        return ctx.step("new", record, ctx, 1, "new")["label"]


# -- declared input (orchestration.inputs) ------------------------------------


class Shipment(BaseModel):
    order_id: int
    address: str
    express: bool = False


@workflow("ship_order", input=Shipment)
def ship_order(ctx: Any, shipment: Shipment) -> Any:
    """Returns what it was given, to show the model instance arrived."""
    return {"given": type(shipment).__name__, "order_id": shipment.order_id, "express": shipment.express}


def refund_amount(data: Any) -> int:
    """A callable schema: the amount in cents, refusing what is not one."""
    amount = data["amount_cents"]
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise ValueError(f"field 'amount_cents' must be a whole number of cents above 0, not {amount!r}")
    return amount


@workflow("refund", input=refund_amount)
def refund(ctx: Any, amount_cents: int) -> Any:
    return {"refunded": amount_cents}


@workflow("start_a_shipment")
def start_a_shipment(ctx: Any, data: Any) -> Any:
    """Starts a child ship_order run with the input it is given."""
    return ctx.start_child("ship_order", data).workflow_id.hex


@workflow("reports_counting", max_retries=0)
def reports_counting(ctx: Any, data: Any) -> Any:
    """Whether the process that runs it keeps Prometheus counters."""
    return {"counting": observe.instruments() is not None}


@workflow("connection_parameters", max_retries=0)
def connection_parameters(ctx: Any, names: list[str]) -> Any:
    """The libpq parameters ``names`` of the connection its worker thread runs it on (those set)."""

    def read() -> dict[str, str]:
        connection.ensure_connection()
        parameters = connection.connection.info.get_parameters()
        return {name: parameters[name] for name in names if name in parameters}

    return ctx.step("read", read)


#: What a remote API's error body can hold: a window title, a screen clear, a forged log line.
HOSTILE_TEXT = "\x1b]0;owned\x07\x1b[2J\nWARNING orchestration: workflow 0 (fake) completed"


def raise_loud(ctx: Any, size: int) -> None:
    raise ValueError(HOSTILE_TEXT + "x" * size)


@workflow("loud_failure", max_retries=2)
def loud_failure(ctx: Any, data: dict[str, int]) -> Any:
    return ctx.step("loud\x1b[2J step", raise_loud, ctx, data["size"])


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@workflow("deep_output", max_retries=0)
def deep_output(ctx: Any, data: dict[str, int]) -> Any:
    return ctx.step("nest", nested, data["depth"])


@workflow("loops_forever", max_retries=0)
def loops_forever(ctx: Any, data: Any) -> Any:
    """Never returns: a step a turn, for ``run_workflows``' timeout."""
    turn = 0
    while True:
        turn += 1
        ctx.step(f"turn {turn}", lambda: None)


@workflow("overruns_its_step_timeout", max_retries=0)
def overruns_its_step_timeout(ctx: Any, data: dict[str, float]) -> Any:
    return ctx.step("nap", time.sleep, data["seconds"], timeout=data["limit"])


@workflow("reports_then_waits", max_retries=0)
def reports_then_waits(ctx: Any, data: Any) -> Any:
    """Half done, then waits for event "go", then done: progress a waiter sees change."""
    ctx.set_progress({"done": 1, "total": 2, "message": "waiting for go"})
    ctx.wait_for_event("go")
    ctx.set_progress({"done": 2, "total": 2, "message": "finished"})
    return "went"


def report_often(ctx: Any, reports: int, pause: float) -> int:
    for n in range(1, reports + 1):
        ctx.set_progress({"done": n, "total": reports})
        time.sleep(pause)
    return reports


@workflow("reports_often", max_retries=0)
def reports_often(ctx: Any, data: dict[str, Any]) -> Any:
    """A step that reports ``reports`` times, ``pause`` seconds apart (a closure over ctx)."""
    return ctx.step("count", report_often, ctx, data["reports"], data["pause"])


def cancel_then_report(ctx: Any) -> None:
    from orchestration import cancel_workflow

    cancel_workflow(ctx.workflow_id, "cancelled by the test")
    ctx.set_progress({"done": 1})


@workflow("reports_after_losing_its_run", max_retries=0)
def reports_after_losing_its_run(ctx: Any, data: Any) -> Any:
    ctx.step("cancel, then report", cancel_then_report, ctx)


@workflow("reports_badly", max_retries=0)
def reports_badly(ctx: Any, data: Any) -> Any:
    """Each bad value is refused at the call; the run goes on to report a good one."""
    refused = []
    for bad in (["a", "list"], "50%", {"when": object()}, {"message": "x" * 10_000}):
        try:
            ctx.set_progress(bad)
        except Exception as exc:
            refused.append(f"{type(exc).__name__}: {exc}")
    ctx.set_progress({"done": 1, "total": 1})
    return refused


@workflow("tags_its_children", max_retries=0)
def tags_its_children(ctx: Any, data: dict[str, Any]) -> Any:
    inherited = ctx.start_child("echo", 1, inherit_tags=True, tags=["child"])
    own = ctx.start_child("echo", 2, tags=["child"])
    batch = ctx.start_children("echo", [3], inherit_tags=True)
    return [str(inherited.workflow_id), str(own.workflow_id), str(batch[0].workflow_id)]


@workflow("reports_in_a_timed_step", max_retries=0)
def reports_in_a_timed_step(ctx: Any, data: Any) -> Any:
    """A step under a time limit runs in a thread of its own: its reports are written from there."""
    return ctx.step("count", report_often, ctx, 3, 0, timeout=10)


@workflow("pauses_itself", max_retries=0)
def pauses_itself(ctx: Any, data: dict[str, int]) -> Any:
    """Three steps; the body of step ``data["at"]`` pauses its own run, as an operator would meanwhile."""

    def body(number: int, label: str) -> Any:
        if number == data["at"]:
            pause_workflow(ctx.workflow_id)
        return record(ctx, number, label)

    return [ctx.step(label, body, n, label)["step"] for n, label in enumerate(("first", "second", "third"), 1)]


@workflow("pauses_itself_then_reports", max_retries=0)
def pauses_itself_then_reports(ctx: Any, data: dict[str, int]) -> Any:
    """``pauses_itself``, whose paused step then reports progress (a write due: the test makes every one due)."""

    def body(number: int, label: str) -> Any:
        if number == data["at"]:
            pause_workflow(ctx.workflow_id)
            ctx.set_progress({"done": number, "total": 3})
        return record(ctx, number, label)

    return [ctx.step(label, body, n, label)["step"] for n, label in enumerate(("first", "second", "third"), 1)]
