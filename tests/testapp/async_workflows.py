"""``async def`` workflows and steps for the tests. Every async step body
records a StepRun through the async ORM."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from asgiref.sync import sync_to_async

from orchestration import workflow

from .models import StepRun


async def arecord(ctx: Any, step_number: int, label: str, sleep: float = 0) -> dict[str, Any]:
    await StepRun.objects.acreate(workflow_id=ctx.workflow_id, step_number=step_number, label=label, pid=os.getpid())
    if sleep:
        await asyncio.sleep(sleep)
    return {"step": step_number, "label": label}


@workflow("async_three_steps")
async def async_three_steps(ctx: Any, data: Any) -> Any:
    sleep = (data or {}).get("sleep", 0)
    steps = [await ctx.step(label, arecord, ctx, n, label, sleep) for n, label in enumerate(("a", "b", "c"), 1)]
    return {"steps": [step["step"] for step in steps], "input": data}


@workflow("async_pauses_itself_then_reports", max_retries=0)
async def async_pauses_itself_then_reports(ctx: Any, data: dict[str, int]) -> Any:
    """Three async steps; the body of step ``data["at"]`` pauses its own run, then reports progress
    and lets the report's write (in the background) run before it returns."""
    from orchestration import pause_workflow

    async def body(number: int, label: str) -> Any:
        if number == data["at"]:
            await sync_to_async(pause_workflow)(ctx.workflow_id)
            ctx.set_progress({"done": number, "total": 3})
            await asyncio.sleep(0.2)
        return await arecord(ctx, number, label)

    return [(await ctx.step(label, body, n, label))["step"] for n, label in enumerate(("a", "b", "c"), 1)]


def fail_on_first_attempt(ctx: Any) -> dict[str, int]:
    StepRun.objects.create(workflow_id=ctx.workflow_id, step_number=2, label="sync", pid=os.getpid())
    if ctx.attempt == 1:
        raise ConnectionError("flaky on the first attempt")
    return {"attempt": ctx.attempt}


@workflow("async_mixed", max_retries=2)
async def async_mixed(ctx: Any, data: Any) -> Any:
    """An async step, a sync step (failing on the first attempt), a durable sleep, an async step."""
    first = await ctx.step("async first", arecord, ctx, 1, "async")
    second = await ctx.step("sync second", fail_on_first_attempt, ctx)
    await ctx.sleep("nap", (data or {}).get("nap", 0))
    last = await ctx.step("async last", arecord, ctx, 4, "async")
    return [first["step"], second["attempt"], last["step"]]


@workflow("async_slow_step", max_retries=0)
async def async_slow_step(ctx: Any, data: Any) -> Any:
    return await ctx.step("slow", asyncio.sleep, data["seconds"], timeout=data["timeout"])


async def wait_to_be_cancelled(ctx: Any) -> None:
    await StepRun.objects.acreate(workflow_id=ctx.workflow_id, step_number=1, label="started", pid=os.getpid())
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        await StepRun.objects.acreate(workflow_id=ctx.workflow_id, step_number=1, label="cancelled", pid=os.getpid())
        raise


@workflow("async_cancellable", max_retries=0)
async def async_cancellable(ctx: Any, data: Any) -> Any:
    return await ctx.step("wait", wait_to_be_cancelled, ctx)


async def await_a_cancelled_task(ctx: Any) -> dict[str, int]:
    """On the first attempt, raise a ``CancelledError`` of its own: that of a task someone else cancelled."""
    if ctx.attempt == 1:
        task = asyncio.ensure_future(asyncio.sleep(60))
        task.cancel()
        await task
    return {"attempt": ctx.attempt}


@workflow("async_awaits_a_cancelled_task", max_retries=1)
async def async_awaits_a_cancelled_task(ctx: Any, data: Any) -> Any:
    return await ctx.step("await", await_a_cancelled_task, ctx)


@workflow("sync_with_an_async_step", max_retries=3)
def sync_with_an_async_step(ctx: Any, data: Any) -> Any:
    """A plain workflow given an async step by mistake."""
    return ctx.step("a", arecord, ctx, 1, "a")


@workflow("async_patched", max_retries=0)
async def async_patched(ctx: Any, data: Any) -> Any:
    """``ctx.patched`` awaited before its first step, and ``deprecate_patch`` after it."""
    new = await ctx.patched("async-v2")
    first = await ctx.step("v2" if new else "v1", arecord, ctx, 1, "v2" if new else "v1")
    await ctx.deprecate_patch("async-v2")
    return {"new": new, "step": first["label"]}


@workflow("async_patched_not_awaited", max_retries=3)
async def async_patched_not_awaited(ctx: Any, data: Any) -> Any:
    """The mistake ``if ctx.patched(...)`` without ``await``: a coroutine is always true."""
    return {"new": bool(ctx.patched("async-v2"))}


@workflow("async_atomic_step_of_an_async_body", max_retries=3)
async def async_atomic_step_of_an_async_body(ctx: Any, data: Any) -> Any:
    """An ``async def`` body given to ``atomic_step``, which runs a plain function in a transaction."""
    return await ctx.atomic_step("a", arecord, ctx, 1, "a")


@workflow("async_two_naps", max_retries=1)
async def async_two_naps(ctx: Any, data: Any) -> Any:
    """Two async steps that await ``asyncio.sleep``: ``first`` and then ``second`` seconds."""
    await ctx.step("first", arecord, ctx, 1, "first", data["first"])
    await ctx.step("second", arecord, ctx, 2, "second", data["second"])
    return data


@workflow("async_nap_outside_steps", max_retries=0)
async def async_nap_outside_steps(ctx: Any, data: Any) -> Any:
    """Awaits in the workflow function itself, in no step."""
    await asyncio.sleep(data["seconds"])
    return await ctx.step("after", arecord, ctx, 1, "after")


async def exit_the_process() -> None:
    raise SystemExit("a step that calls sys.exit")


@workflow("async_exits", max_retries=0)
async def async_exits(ctx: Any, data: Any) -> Any:
    return await ctx.step("exit", exit_the_process)


async def aread_then_hang(ctx: Any, seconds: float) -> dict[str, int]:
    """Reads through the async ORM, then awaits an outside call with no timeout of its own."""
    await arecord(ctx, 1, f"attempt {ctx.attempt}")
    await asyncio.sleep(seconds)
    return {"attempt": ctx.attempt}


@workflow("async_reads_then_hangs", max_retries=2)
async def async_reads_then_hangs(ctx: Any, data: Any) -> Any:
    return await ctx.step("read then hang", aread_then_hang, ctx, data["hang"], timeout=data["timeout"])


async def asleep_in_the_database(ctx: Any, seconds: float) -> None:
    """``pg_sleep`` through ``sync_to_async``, as the async ORM runs its queries."""
    from .endings import sleep_in_the_database

    await sync_to_async(sleep_in_the_database)(ctx, seconds)


@workflow("async_sleeps_in_the_database", max_retries=0)
async def async_sleeps_in_the_database(ctx: Any, data: Any) -> Any:
    seconds, timeout = data["seconds"], data["timeout"]
    return await ctx.step("sleep in the database", asleep_in_the_database, ctx, seconds, timeout=timeout)


@workflow("async_batch", max_retries=0)
async def async_batch(ctx: Any, data: Any) -> Any:
    """``batch``, awaited: ``square_or_fail`` children, their outcomes with failures as their status."""
    handles = await ctx.start_children("square_or_fail", data["inputs"])
    outcomes = await ctx.wait_for(handles, return_exceptions=True)
    return [{"failed": outcome.status} if isinstance(outcome, Exception) else outcome for outcome in outcomes]


async def areport(ctx: Any, done: int) -> int:
    ctx.set_progress({"done": done, "total": 3, "message": "in an async step"})
    return done


@workflow("async_reports")
async def async_reports(ctx: Any, data: Any) -> Any:
    ctx.set_progress({"done": 0, "total": 3, "message": "starting"})
    for n in (1, 2):
        await ctx.step(f"report {n}", areport, ctx, n)
    ctx.set_progress({"done": 3, "total": 3, "message": "done"})
    return "reported"
