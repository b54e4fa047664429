"""Prometheus metrics (``orchestration.metrics.metrics_view``) and OpenTelemetry
traces (``orchestration.observability.tracing``), with the optional libraries installed, and
what each does without them."""

from __future__ import annotations

import datetime
import sys
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once
from prometheus_client.parser import text_string_to_metric_families

from orchestration import start_workflow
from orchestration.models import Workflow, WorkflowWorker
from orchestration.observability import tracing
from tests.factories import WorkflowFactory
from tests.support import METRICS_AUTH, drain

pytestmark = pytest.mark.django_db

METRICS_URL = "/metrics/"


def scrape(client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of the metrics page, by name and labels, parsed by prometheus_client's own parser."""
    response = client.get(METRICS_URL, **METRICS_AUTH)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def labels(**values: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(values.items()))


# -- metrics -------------------------------------------------------------------------


def test_metrics_view__parses_and_its_gauges_match_the_table(client):
    past = timezone.now() - datetime.timedelta(minutes=10)
    WorkflowFactory.create_batch(3, workflow_type="echo", status="pending")
    WorkflowFactory(workflow_type="echo", status="pending", run_after=timezone.now() + datetime.timedelta(hours=1))
    WorkflowFactory.create_batch(2, workflow_type="echo", status="running")
    WorkflowFactory.create_batch(2, workflow_type="on_other_queue", queue="other", status="pending")
    WorkflowFactory.create_batch(4, workflow_type="echo", status="completed")  # finished: not a gauge
    Workflow.objects.filter(workflow_type="on_other_queue").update(created_at=past)
    WorkflowWorker.objects.create(id="a:1:x", host="a", pid=1, queues=["other"], concurrency=3, version="1")
    WorkflowWorker.objects.create(id="b:2:y", host="b", pid=2, queues=None, concurrency=2, version="1")
    WorkflowWorker.objects.create(id="c:3:z", host="c", pid=3, concurrency=9, version="1", gone_at=timezone.now())
    samples = scrape(client)
    for queue, workflow_type in (("default", "echo"), ("other", "on_other_queue")):
        for status in ("pending", "running"):
            expected = Workflow.objects.filter(queue=queue, workflow_type=workflow_type, status=status).count()
            key = ("orchestration_workflows", labels(queue=queue, workflow_type=workflow_type, status=status))
            assert samples[key] == expected, key
    assert samples[("orchestration_workflows_due", labels(queue="default", workflow_type="echo"))] == 3
    assert samples[("orchestration_workflows_due", labels(queue="other", workflow_type="on_other_queue"))] == 2
    oldest = samples[("orchestration_oldest_due_seconds", labels(queue="other", workflow_type="on_other_queue"))]
    assert 590 < oldest < 700
    # A registered type with nothing reads 0 rather than vanishing.
    assert samples[("orchestration_workflows_due", labels(queue="default", workflow_type="three_steps"))] == 0
    assert samples[("orchestration_worker_processes", labels(state="live"))] == 2
    assert samples[("orchestration_worker_processes", labels(state="gone"))] == 1
    assert samples[("orchestration_queue_workers", labels(queue="other"))] == 2  # a's, and b's (every queue)
    assert samples[("orchestration_queue_worker_threads", labels(queue="other"))] == 5
    assert samples[("orchestration_queue_workers", labels(queue="default"))] == 1
    assert samples[("orchestration_metrics_database_up", ())] == 1


def test_metrics_view__counts_paused_runs_apart_neither_due_nor_running(client):
    WorkflowFactory.create_batch(2, workflow_type="echo", status="paused")
    WorkflowFactory(workflow_type="echo", status="pending")
    samples = scrape(client)
    echo = {"queue": "default", "workflow_type": "echo"}
    assert samples[("orchestration_workflows", labels(**echo, status="paused"))] == 2
    assert samples[("orchestration_workflows", labels(**echo, status="running"))] == 0
    assert samples[("orchestration_workflows_due", labels(**echo))] == 1
    nothing_paused = labels(queue="default", workflow_type="three_steps", status="paused")
    assert samples[("orchestration_workflows", nothing_paused)] == 0


def test_metrics_view__counts_the_attempts_and_steps_this_process_ran(client):
    def counted(name: str, **extra: str) -> float:
        return scrape(client).get((name, labels(queue="default", workflow_type="three_steps", **extra)), 0.0)

    before = {
        name: counted(name)
        for name in (
            "orchestration_workflows_started_total",
            "orchestration_workflows_completed_total",
        )
    }
    steps_before = counted("orchestration_step_duration_seconds_count", outcome="completed")
    start_workflow("three_steps", {"n": 1})
    start_workflow("three_steps", {"n": 2})
    assert drain() == ["completed", "completed"]
    assert counted("orchestration_workflows_started_total") == before["orchestration_workflows_started_total"] + 2
    assert counted("orchestration_workflows_completed_total") == before["orchestration_workflows_completed_total"] + 2
    assert counted("orchestration_step_duration_seconds_count", outcome="completed") == steps_before + 6
    assert counted("orchestration_workflow_duration_seconds_count", outcome="completed") >= 2


def test_metrics_view__counts_the_async_steps_of_an_async_workflow(client):
    def counted() -> float:
        steps = labels(queue="default", workflow_type="async_three_steps", outcome="completed")
        return scrape(client).get(("orchestration_step_duration_seconds_count", steps), 0.0)

    before = counted()
    start_workflow("async_three_steps", {"n": 1})
    assert drain() == ["completed"]
    assert counted() == before + 3


def test_metrics_view__counts_retried_and_failed_attempts(client):
    def counted(name: str) -> float:
        return scrape(client).get((name, labels(queue="default", workflow_type="always_fails")), 0.0)

    retried, failed = counted("orchestration_workflows_retried_total"), counted("orchestration_workflows_failed_total")
    start_workflow("always_fails")
    assert drain() == ["retrying", "retrying", "failed"]
    assert counted("orchestration_workflows_retried_total") == retried + 2
    assert counted("orchestration_workflows_failed_total") == failed + 1


def test_metrics_view__counts_each_failed_run_of_a_step_by_its_outcome(client):
    def counted(outcome: str) -> float:
        steps = labels(queue="default", workflow_type="always_fails", outcome=outcome)
        return scrape(client).get(("orchestration_step_duration_seconds_count", steps), 0.0)

    failed, completed = counted("failed"), counted("completed")
    start_workflow("always_fails")
    assert drain() == ["retrying", "retrying", "failed"]
    assert (counted("failed"), counted("completed")) == (failed + 3, completed)


def test_metrics_view__without_prometheus_client__says_how_to_install_it(client, monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # an import of it raises ImportError
    monkeypatch.setitem(sys.modules, "prometheus_client.exposition", None)
    response = client.get(METRICS_URL, **METRICS_AUTH)
    assert response.status_code == 501
    assert 'pip install "django-orchestration[prometheus]"' in response.content.decode()


# -- traces --------------------------------------------------------------------------


def _reset_tracer_provider() -> None:
    """Let a test set the global tracer provider, which the API lets be set once a process."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_tracer_provider()
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    _reset_tracer_provider()  # the next tests run with tracing off again


def test_traces__a_three_step_workflow_is_one_attempt_span_with_three_step_spans_under_the_callers_span(spans):
    caller_tracer = trace.get_tracer("the caller")
    with caller_tracer.start_as_current_span("handle order") as caller:
        workflow = start_workflow("three_steps", {"n": 1})
    assert Workflow.objects.get(pk=workflow.pk).trace_context["traceparent"].split("-")[2] == format(
        caller.get_span_context().span_id, "016x"
    )
    assert drain() == ["completed"]  # outside the caller's span: the row carries the context
    finished = {span.name: span for span in spans.get_finished_spans()}
    attempt = finished["workflow three_steps"]
    caller_context = caller.get_span_context()
    assert attempt.parent.span_id == caller_context.span_id
    assert attempt.context.trace_id == caller_context.trace_id
    assert attempt.attributes["orchestration.workflow.id"] == str(workflow.pk)
    assert attempt.attributes["orchestration.attempt"] == 1
    assert attempt.attributes["orchestration.outcome"] == "completed"
    steps = sorted(
        (span for span in spans.get_finished_spans() if span.name.startswith("step ")),
        key=lambda span: span.attributes["orchestration.step.number"],
    )
    assert [span.name for span in steps] == ["step first", "step second", "step third"]
    assert [span.attributes["orchestration.step.number"] for span in steps] == [1, 2, 3]
    assert all(span.parent.span_id == attempt.context.span_id for span in steps)
    assert all(span.context.trace_id == caller_context.trace_id for span in steps)
    assert {span.attributes["orchestration.outcome"] for span in steps} == {"completed"}


def test_traces__a_failing_step_is_an_error_span_and_a_replayed_step_makes_none(spans):
    start_workflow("flaky", {"succeed_on": 2})
    assert drain() == ["retrying", "completed"]
    steps = [span for span in spans.get_finished_spans() if span.name.startswith("step ")]
    # Attempt 1: prepare, flaky call (failed); attempt 2: flaky call only (prepare is replayed).
    assert [(s.name, s.attributes["orchestration.attempt"]) for s in steps] == [
        ("step prepare", 1),
        ("step flaky call", 1),
        ("step flaky call", 2),
    ]
    failed = steps[1]
    assert failed.attributes["orchestration.outcome"] == "failed"
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert failed.events[0].name == "exception"
    attempts = [span for span in spans.get_finished_spans() if span.name == "workflow flaky"]
    assert [span.attributes["orchestration.outcome"] for span in attempts] == ["retried", "completed"]
    assert attempts[0].parent is None  # started outside any span: a trace of its own


def test_traces__without_a_tracer_provider__nothing_is_stored_and_an_attempt_reads_nothing_more():
    assert tracing.tracer() is None
    with trace.get_tracer("no provider").start_as_current_span("a no-op span"):
        workflow = start_workflow("three_steps", {"n": 1})
    assert Workflow.objects.get(pk=workflow.pk).trace_context is None
    with CaptureQueriesContext(connection) as queries:
        drain()
    assert not any("trace_context" in query["sql"] for query in queries.captured_queries)


def test_traces__without_opentelemetry_installed__are_off(monkeypatch):
    monkeypatch.setattr(tracing, "_api", None)  # as when the import failed
    assert tracing.tracer() is None and tracing.caller_context() is None
    workflow = start_workflow("three_steps", {"n": 1})
    assert drain() == ["completed"]
    assert Workflow.objects.get(pk=workflow.pk).trace_context is None


def test_metrics_page__refuses_a_scrape_without_the_token_or_a_staff_session(client):
    from django.contrib.auth.models import User

    assert client.get(METRICS_URL).status_code == 401
    assert client.get(METRICS_URL, HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    client.force_login(User.objects.create_user("someone"))
    response = client.get(METRICS_URL)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'


def test_metrics_page__answers_the_token_and_a_staff_session(client, admin_client):
    assert client.get(METRICS_URL, **METRICS_AUTH).status_code == 200
    assert admin_client.get(METRICS_URL).status_code == 200
