"""What a worker reports of each attempt and each step it runs: a span
(``orchestration.observability.tracing``, with ``opentelemetry-api`` and a tracer provider)
and Prometheus counters and histograms (with ``prometheus_client``).

Two decorators put them around the engine's own functions: ``attempt`` around
``worker.execution.execute`` and ``step`` around ``ctx.step`` and
``ctx.atomic_step`` (an async workflow's ``ctx.step`` of an ``async def`` body
holds ``step_report`` across its awaits). With neither library in use they call the function and
nothing else: the imports are tried once, and each call then costs one
look-up of the tracer provider.

The instruments live in ``REGISTRY`` below, not in ``prometheus_client``'s
default one: ``metrics.metrics_view`` serves them with the database's gauges,
and ``runworkers --metrics-port`` serves a worker's own. With
``PROMETHEUS_MULTIPROC_DIR`` set, ``prometheus_client`` writes them to files
there instead, which the view reads for every process of the machine.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar, cast

from ..errors import DeadlineExceeded, LeaseLost, ReleaseRequested, Suspend, WorkflowCancelled
from . import tracing

F = TypeVar("F", bound=Callable[..., Any])

#: Exceptions that end a step without it failing: the engine's own control flow.
INTERRUPTIONS = (LeaseLost, WorkflowCancelled, ReleaseRequested, Suspend, DeadlineExceeded)

#: The outcomes of ``worker.execution.Outcome`` each counter counts.
COUNTED = {"completed": "completed", "finishing": "completed", "failed": "failed", "retrying": "retried"}

#: Bucket bounds, in seconds, of the duration histograms: from a millisecond to an hour.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class StepContext(Protocol):
    """What ``step`` reads of ``ctx`` (a ``context.WorkflowContext``)."""

    @property
    def workflow_id(self) -> Any: ...
    @property
    def workflow_type(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    def next_step(self) -> tuple[int, bool]: ...


class Instruments:
    """The counters and histograms of attempts and steps, by queue and workflow type."""

    def __init__(self, prometheus_client: Any) -> None:
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        labels = ("queue", "workflow_type")
        counter, histogram = prometheus_client.Counter, prometheus_client.Histogram
        options: dict[str, Any] = {"labelnames": labels, "registry": self.registry}
        self.started = counter("orchestration_workflows_started", "Attempts started.", **options)
        self.counters = {
            "completed": counter("orchestration_workflows_completed", "Workflows completed.", **options),
            "failed": counter("orchestration_workflows_failed", "Workflows failed (no retry left).", **options),
            "retried": counter("orchestration_workflows_retried", "Attempts failed, to be retried.", **options),
        }
        timed: dict[str, Any] = {**options, "labelnames": (*labels, "outcome"), "buckets": BUCKETS}
        self.attempt_seconds = histogram(
            "orchestration_workflow_duration_seconds", "Duration of an attempt, by how it ended.", **timed
        )
        self.step_seconds = histogram(
            "orchestration_step_duration_seconds", "Duration of a step that ran, by how it ended.", **timed
        )
        process: dict[str, Any] = {"registry": self.registry}
        self.abandoned_bodies = prometheus_client.Gauge(
            "orchestration_abandoned_step_bodies",
            "Step bodies abandoned past their limit that still run in this worker process.",
            multiprocess_mode="livesum",
            **process,
        )
        self.restarts = counter(
            "orchestration_worker_restarts",
            "Restarts of this worker process at MAX_ABANDONED_BODIES.",
            **process,
        )
        self._children: dict[tuple[Any, ...], Any] = {}

    def attempt_started(self, queue: str, workflow_type: str) -> None:
        self._child(self.started, (queue, workflow_type)).inc()

    def attempt_ended(self, queue: str, workflow_type: str, outcome: str, seconds: float) -> None:
        counted = COUNTED.get(outcome)
        if counted is not None:
            self._child(self.counters[counted], (queue, workflow_type)).inc()
        self._child(self.attempt_seconds, (queue, workflow_type, counted or outcome)).observe(seconds)

    def step_ended(self, queue: str, workflow_type: str, outcome: str, seconds: float) -> None:
        self._child(self.step_seconds, (queue, workflow_type, outcome)).observe(seconds)

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        """``metric.labels(*labels)``, kept: ``labels()`` takes a lock and builds a key on every call."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child


_NOT_TRIED: Any = object()
_instruments: Any = _NOT_TRIED
_making = threading.Lock()


def shared_between_processes() -> bool:
    """Whether ``prometheus_client`` writes this process's instruments to files
    that every process of the machine reads (multiprocess mode)."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


@contextlib.contextmanager
def unread() -> Iterator[None]:
    """While in it, this process keeps no instruments (``instruments()`` is None).

    For a ``runworkers`` that neither serves them (``--metrics-port``) nor shares
    them (``shared_between_processes``): no scrape reaches what it would count,
    and counting costs every attempt and step it runs."""
    global _instruments
    with _making:
        kept, _instruments = _instruments, None
    try:
        yield
    finally:
        with _making:
            _instruments = kept


def instruments() -> Instruments | None:
    """The instruments, made on first use; None without ``prometheus_client``
    (or inside ``unread``)."""
    global _instruments
    if _instruments is _NOT_TRIED:
        # Made once: two sets, from two threads' first attempts, would each
        # count apart (and overwrite each other's files in multiprocess mode).
        with _making:
            if _instruments is _NOT_TRIED:
                try:
                    import prometheus_client
                except ImportError:
                    _instruments = None
                else:
                    _instruments = Instruments(prometheus_client)
    return cast(Instruments | None, _instruments)


def abandoned_bodies(count: int) -> None:
    """Report how many abandoned step bodies run on in this process (``timeouts``)."""
    counting = instruments()
    if counting is not None:
        counting.abandoned_bodies.set(count)


def restarted(times: int = 1) -> None:
    """Count restarts of this worker process at its cap of abandoned bodies."""
    counting = instruments()
    if counting is not None:
        counting.restarts.inc(times)


def attempt(execute: F) -> F:
    """Report each call of ``execute(run, ...)``, which returns an ``Outcome``
    and never raises for anything the workflow does. An ``async def`` one
    (``execute_async``) is given ``on_thread``, on which the run's stored
    trace context is read: the loop must not query."""
    if inspect.iscoroutinefunction(execute):

        @functools.wraps(execute)
        async def observed_async(run: Any, *args: Any, on_thread: Any, **kwargs: Any) -> Any:
            tracer = tracing.tracer()
            counting = instruments()
            if tracer is None and counting is None:
                return await execute(run, *args, on_thread=on_thread, **kwargs)
            carrier = await on_thread(tracing.stored_context)(run.id) if tracer is not None else None
            report = _AttemptReport(tracer, counting, run, carrier)
            try:
                outcome = await execute(run, *args, on_thread=on_thread, **kwargs)
            except BaseException as exc:
                report.raised(exc)
                raise
            return report.ended(outcome)

        return cast(F, observed_async)

    @functools.wraps(execute)
    def observed(run: Any, *args: Any, **kwargs: Any) -> Any:
        tracer = tracing.tracer()
        counting = instruments()
        if tracer is None and counting is None:
            return execute(run, *args, **kwargs)
        carrier = tracing.stored_context(run.id) if tracer is not None else None
        report = _AttemptReport(tracer, counting, run, carrier)
        try:
            outcome = execute(run, *args, **kwargs)
        except BaseException as exc:
            report.raised(exc)
            raise
        return report.ended(outcome)

    return cast(F, observed)


class _AttemptReport:
    """One attempt's count, its span (current while it runs, when traced) and
    its duration by outcome. A class, as ``_StepReport``, made once an attempt."""

    __slots__ = ("counting", "run", "span", "span_context", "started")

    def __init__(self, tracer: Any, counting: Instruments | None, run: Any, carrier: Any) -> None:
        self.started = time.monotonic()
        self.counting, self.run = counting, run
        self.span_context: contextlib.AbstractContextManager[Any] | None = None
        self.span: Any = None
        if counting is not None:
            counting.attempt_started(run.queue, run.workflow_type)
        if tracer is not None:
            self.span_context = tracing.attempt_span(tracer, run, carrier)
            self.span = self.span_context.__enter__()

    def ended(self, outcome: Any) -> Any:
        """Report the attempt's ``outcome`` (returned back)."""
        if self.span_context is not None:
            tracing.end(self.span, COUNTED.get(str(outcome), str(outcome)), failed=outcome in ("failed", "retrying"))
            self.span_context.__exit__(None, None, None)
        if self.counting is not None:
            run = self.run
            self.counting.attempt_ended(run.queue, run.workflow_type, str(outcome), time.monotonic() - self.started)
        return outcome

    def raised(self, exc: BaseException) -> None:
        """The attempt ended by raising (the engine's own failure, a loop that
        closes): its span ends with the exception, and no outcome is counted."""
        if self.span_context is not None:
            self.span_context.__exit__(type(exc), exc, exc.__traceback__)


def step(method: F) -> F:
    """Report each step that ``method`` (``ctx.step``, ``ctx.atomic_step``)
    runs; a replayed step runs nothing and is not reported."""

    @functools.wraps(method)
    def observed(ctx: StepContext, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        report = step_report(ctx, name)
        if report is None:
            return method(ctx, name, fn, *args, **kwargs)
        with report:
            return method(ctx, name, fn, *args, **kwargs)

    return cast(F, observed)


def step_report(ctx: StepContext, name: str) -> contextlib.AbstractContextManager[None] | None:
    """The report of the step ``ctx`` runs next, to hold while it runs (the
    async ``ctx.step`` holds it across its awaits); None when there is
    nothing to report: no library in use, or a replayed step."""
    tracer = tracing.tracer()
    counting = instruments()
    if tracer is None and counting is None:
        return None
    number, replayed = ctx.next_step()
    if replayed:
        return None
    return _StepReport(ctx, number, name, tracer, counting)


class _StepReport:
    """One running step's span (when traced) and its duration by outcome.
    A class rather than a generator's context manager: it is made and held
    once a step, and ``contextlib``'s machinery cost more than the report."""

    __slots__ = ("counting", "ctx", "name", "number", "span", "span_context", "started", "tracer")

    def __init__(self, ctx: StepContext, number: int, name: str, tracer: Any, counting: Instruments | None) -> None:
        self.ctx, self.number, self.name, self.tracer, self.counting = ctx, number, name, tracer, counting
        self.span_context: contextlib.AbstractContextManager[Any] | None = None
        self.span: Any = None
        self.started = 0.0

    def __enter__(self) -> None:
        self.started = time.monotonic()
        if self.tracer is not None:
            self.span_context = tracing.step_span(self.tracer, self.ctx, self.number, self.name)
            self.span = self.span_context.__enter__()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, traceback: Any) -> None:
        if exc is None:
            outcome, error = "completed", None
        elif isinstance(exc, INTERRUPTIONS):
            outcome, error = "interrupted", None
        else:
            outcome, error = "failed", exc
        try:
            if self.span is not None:
                tracing.end(self.span, outcome, error)
            if self.counting is not None and outcome != "interrupted":
                self.counting.step_ended(
                    self.ctx.queue, self.ctx.workflow_type, outcome, time.monotonic() - self.started
                )
        finally:
            if self.span_context is not None:
                self.span_context.__exit__(kind, exc, traceback)


def serve(port: int, address: str = "127.0.0.1") -> None:
    """Serve this process's instruments, with its memory and CPU, on
    ``http://address:port/`` (``runworkers --metrics-port``, ``--metrics-address``):
    a worker on a machine of its own is scraped there. Unauthenticated, so this
    machine only unless ``address`` says otherwise. Raises ImportError without ``prometheus_client``."""
    import prometheus_client

    counting = instruments()
    assert counting is not None
    prometheus_client.ProcessCollector(registry=counting.registry)
    prometheus_client.start_http_server(port, address, registry=counting.registry)
