"""Testing workflows: run the due runs in the test's own thread, on its own
database connection, so that a ``django.test.TestCase`` (whose rows are never
committed) or pytest-django's ``db`` sees them run, step by step, as a worker
would run them.

``run_workflows`` is a worker in the calling thread: the claim, the lease,
the checkpoints, the retries, the children, the events and the deadlines are
the engine's own. ``advance`` moves the runs' time forward, to test what
happens when a timer ends, an event's time limit passes or a deadline does;
``steps`` and ``history`` read a run back for assertions.

Importing this module loads no models; the pytest plugin
(``orchestration.testing.pytest_plugin``) registers the ``run_workflows``
fixture.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .reading import StepView, history, steps
    from .runner import RunWorkflowsTimeout, advance, run_workflows

# Loaded on first use: pytest imports the plugin, and with it this package, before Django is set up.
_LAZY = {
    "RunWorkflowsTimeout": "runner",
    "advance": "runner",
    "run_workflows": "runner",
    "StepView": "reading",
    "history": "reading",
    "steps": "reading",
}

__all__ = ["RunWorkflowsTimeout", "StepView", "advance", "history", "run_workflows", "steps"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
