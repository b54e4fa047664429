"""The workflow the benchmark runs: ``steps`` no-op steps, so that what is
measured is the engine (claim, checkpoints, completion), not user code; with
``benchmark --progress``, steps that each report progress once."""

from __future__ import annotations

from typing import Any

from orchestration import workflow

WORKFLOW_TYPE = "benchmark"
#: Type of the pre-loaded finished rows; no worker registers it, so none is ever claimed.
HISTORY_TYPE = "benchmark_history"
STEP_NAMES = tuple(f"step {n}" for n in range(1, 101))


def _noop() -> None:
    return None


def _report(ctx: Any, done: int, total: int) -> None:
    ctx.set_progress({"done": done, "total": total})


def benchmark(ctx: Any, data: dict[str, Any]) -> None:
    steps = data.get("steps", 1)
    for n in range(steps):
        name = STEP_NAMES[n] if n < len(STEP_NAMES) else f"step {n + 1}"
        if data.get("progress"):  # benchmark --progress: each step reports once
            ctx.step(name, _report, ctx, n + 1, steps)
        else:
            ctx.step(name, _noop)


def register() -> None:
    """Register the benchmark's workflow type in this process. Called, not done
    at import, so that only the command and its workers have it (registering the
    same function again is a no-op)."""
    workflow(WORKFLOW_TYPE, max_retries=0)(benchmark)
    from .fan_out import FAN_OUT_TYPE, fan_out  # it imports this module's WORKFLOW_TYPE

    workflow(FAN_OUT_TYPE, max_retries=0)(fan_out)
