"""OpenTelemetry traces, optional: ``pip install "django-orchestration[otel]"``.

``start_workflow`` stores the trace context of the code that calls it on the
row (``workflows.trace_context``); each attempt of the run is then a span
whose parent is the caller's span, wherever and however late the attempt
runs, and each step the attempt runs is a child span of it
(``orchestration.observability.observe`` opens them).

Without ``opentelemetry-api``, or with no tracer provider configured (the
API's default is a no-op), nothing is stored and no span is made: the import
is tried once, and the provider is looked up once an attempt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError

from ..conf import conf
from ..models import Workflow

#: The instrumentation scope of the spans.
SCOPE = "orchestration"

_NOT_TRIED: Any = object()
_api: Any = _NOT_TRIED  # (opentelemetry.trace, opentelemetry.propagate), or None when not installed
_cached: tuple[Any, Any] = (None, None)  # (the tracer provider, our tracer from it or None)


def _otel() -> Any:
    global _api
    if _api is _NOT_TRIED:
        try:
            from opentelemetry import propagate, trace
        except ImportError:
            _api = None
        else:
            _api = (trace, propagate)
    return _api


def tracer() -> Any:
    """This package's tracer, or None when tracing is off: ``opentelemetry-api``
    is not installed, or no tracer provider is set (the API's no-op default)."""
    global _cached
    api = _otel()
    if api is None:
        return None
    trace = api[0]
    provider = trace.get_tracer_provider()
    if provider is not _cached[0]:  # set (or replaced, in tests) since the last look
        off = isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
        _cached = (provider, None if off else provider.get_tracer(SCOPE))
    return _cached[1]


def caller_context() -> dict[str, str] | None:
    """The current trace context as W3C headers (``traceparent``, ``tracestate``),
    to store with a new run; None outside any recording span."""
    api = _otel()
    if api is None:
        return None
    trace, propagate = api
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


def stored_context(workflow_id: Any) -> dict[str, str] | None:
    """The trace context stored with the run; None if there is none (or it cannot be read now)."""
    try:
        rows = Workflow.objects.using(conf.DATABASE).filter(pk=workflow_id).values_list("trace_context", flat=True)
        value = rows.first()
    except DatabaseError:
        return None
    return value if isinstance(value, dict) else None


@contextlib.contextmanager
def attempt_span(tracer: Any, run: Any, carrier: dict[str, str] | None) -> Iterator[Any]:
    """The span of one attempt of ``run`` (a ``lease.Lease``), current while
    it runs, child of the span that started the run if one did (``carrier``:
    its ``stored_context``)."""
    trace, propagate = _otel()
    parent = propagate.extract(carrier) if carrier else None
    attributes = {
        "orchestration.workflow.id": str(run.id),
        "orchestration.workflow.type": run.workflow_type,
        "orchestration.queue": run.queue,
        "orchestration.attempt": run.attempts,
    }
    with tracer.start_as_current_span(
        f"workflow {run.workflow_type}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


@contextlib.contextmanager
def step_span(tracer: Any, ctx: Any, number: int, name: str) -> Iterator[Any]:
    """The span of one step that runs (not replayed), child of its attempt's span."""
    attributes = {
        "orchestration.workflow.id": str(ctx.workflow_id),
        "orchestration.workflow.type": ctx.workflow_type,
        "orchestration.attempt": ctx.attempt,
        "orchestration.step.number": number,
        "orchestration.step.name": name,
    }
    with tracer.start_as_current_span(
        f"step {name}", attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as span:
        yield span


def end(span: Any, outcome: str, error: BaseException | None = None, failed: bool = False) -> None:
    """Write ``outcome`` on ``span``; a failure (``error`` or ``failed``) sets its status to ERROR."""
    span.set_attribute("orchestration.outcome", outcome)
    if error is not None or failed:
        trace = _otel()[0]
        if error is not None:
            span.record_exception(error)
        description = f"{type(error).__name__}: {error}" if error is not None else outcome
        span.set_status(trace.Status(trace.StatusCode.ERROR, description))
