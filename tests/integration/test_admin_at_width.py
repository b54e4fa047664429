"""Every page of the console at width: a run of 20,000 steps, a parent of
thousands of children, a worker holding hundreds of runs, hundreds of queues
and of workflow types each cost the queries of a small one. A run's page shows
a window of its steps (the first, the last, the one it is at, a range asked
for) with links to the rest, and its timeline draws a bar a group of steps.

The rows are made wide (long names, large outputs and errors) and in bulk,
with one ``INSERT ... SELECT generate_series`` each."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.urls import reverse

from orchestration.admin import views
from orchestration.models import WorkflowQueue
from orchestration.reports import step_window
from tests.admin_support import WIDE_ERROR, WIDE_NAME, record_children, record_steps
from tests.factories import WorkflowFactory, WorkflowWorkerFactory

pytestmark = pytest.mark.django_db

#: Queries the run page may make, whatever the number of its steps, children and events.
RUN_PAGE_QUERIES = 8
#: Queries the workers page and a worker's page may make, whatever the number of runs held.
WORKER_PAGE_QUERIES = 6
#: Queries the queues page may make, whatever the number of queues.
QUEUES_PAGE_QUERIES = 8
#: Queries the overview may make, whatever the number of workflow types and queues in use.
OVERVIEW_QUERIES = 50


def record_events(workflow, count: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO workflow_events (workflow_id, name, payload, created_at)
            SELECT %s, 'approval ' || g, jsonb_build_object('note', repeat('y', 500)), now()
            FROM generate_series(1, %s) g
            """,
            [str(workflow.pk), count],
        )


def failed_run(steps: int, **fields):
    """A run that completed ``steps - 1`` steps and failed at the last, after many attempts."""
    history = [
        {"at": "2026-01-01T00:00:00+00:00", "attempt": n, "step": steps, "status": "failed", "message": WIDE_ERROR}
        for n in range(1, 50)
    ]
    workflow = WorkflowFactory(
        workflow_type=WIDE_NAME[:100], status="failed", current_step=steps - 1, attempts=50, max_retries=49,
        error_message=WIDE_ERROR, error_traceback=WIDE_ERROR * 10, error_history=history, **fields,
    )  # fmt: skip
    record_steps(workflow, steps, failed_at=steps)
    return workflow


def run_page(workflow, **params: str) -> str:
    return reverse("admin:orchestration_workflow_change", args=[workflow.pk]) + (
        "?" + "&".join(f"{name}={value}" for name, value in params.items()) if params else ""
    )


def shown_steps(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr class="orch-step-row" data-step="(\d+)">', html)]


def gaps(html: str) -> list[tuple[int, int]]:
    return [
        (int(a), int(b)) for a, b in re.findall(r'class="orch-steps-gap" data-first="(\d+)" data-last="(\d+)"', html)
    ]


def opened(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


# -- the run page: a constant number of queries ------------------------------------------


@pytest.mark.parametrize("steps", [20, 20_000])
def test_run_page__costs_the_same_queries_at_20_steps_as_at_20000(admin_client, django_assert_max_num_queries, steps):
    workflow = failed_run(steps)
    with django_assert_max_num_queries(RUN_PAGE_QUERIES):
        opened(admin_client, run_page(workflow))


@pytest.mark.parametrize("steps", [20, 20_000])
def test_run_page__a_range_of_steps_costs_the_same_queries(admin_client, django_assert_max_num_queries, steps):
    workflow = failed_run(steps)
    with django_assert_max_num_queries(RUN_PAGE_QUERIES):
        opened(admin_client, run_page(workflow, steps="5:300"))


@pytest.mark.parametrize("children", [3, 10_000])
def test_run_page__of_a_parent_costs_the_same_queries_whatever_its_children_and_events(
    admin_client, django_assert_max_num_queries, children
):
    parent = WorkflowFactory(status="pending", current_step=3, waiting_for="children")
    record_steps(parent, 3)
    record_children(parent, children)
    record_events(parent, children)
    with django_assert_max_num_queries(RUN_PAGE_QUERIES):
        html = opened(admin_client, run_page(parent))
    assert f"{children} in all" in html


# -- the run page: many steps, usable ---------------------------------------------------


def test_run_page__of_a_long_run_shows_its_first_and_last_steps_and_the_failed_one(admin_client):
    workflow = failed_run(20_000)
    with connection.cursor() as cursor:  # it failed at step 7,001, then ran no further
        cursor.execute("DELETE FROM workflow_steps WHERE workflow_id = %s AND step_number > 7001", [str(workflow.pk)])
        cursor.execute(
            "UPDATE workflow_steps SET status = 'failed' WHERE workflow_id = %s AND step_number = 7001",
            [str(workflow.pk)],
        )
    workflow.current_step = 7000
    workflow.save(update_fields=["current_step"])
    html = opened(admin_client, run_page(workflow))
    assert shown_steps(html) == [*range(1, 11), *range(6992, 7002)]
    assert gaps(html) == [(11, 6991)]
    assert "20 of 7,001 steps: the first 10 and the last 10." in html
    assert 'href="?steps=11:60#steps">show 11–60</a>' in html
    assert 'href="?steps=6942:6991#steps">show 6,942–6,991</a>' in html


def test_run_page__shows_the_step_a_long_run_is_at_between_its_first_and_last(admin_client):
    workflow = WorkflowFactory(status="running", current_step=499)
    record_steps(workflow, 1_000)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE workflow_steps SET status = 'running', completed_at = NULL WHERE workflow_id = %s "
            "AND step_number = 500",
            [str(workflow.pk)],
        )
    html = opened(admin_client, run_page(workflow))
    assert shown_steps(html) == [*range(1, 11), 500, *range(991, 1001)]
    assert gaps(html) == [(11, 499), (501, 990)]
    assert "21 of 1,000 steps: the first 10, the last 10 and step 500, where the run is." in html
    assert "Running at step 500" in html


def test_run_page__shows_a_range_asked_for_with_links_to_the_pages_before_and_after(admin_client):
    workflow = failed_run(20_000)
    html = opened(admin_client, run_page(workflow, steps="100:149"))
    assert shown_steps(html) == [*range(1, 11), *range(100, 150), *range(19_991, 20_001)]
    assert 'href="?steps=50:99#steps">show 50–99</a>' in html  # the page before
    assert 'href="?steps=150:199#steps">show 150–199</a>' in html  # the page after
    assert "steps 100–149 as asked" in html and 'value="100:149"' in html


def test_run_page__jumps_to_a_step_number_and_the_page_after_it(admin_client):
    workflow = failed_run(20_000)
    html = opened(admin_client, run_page(workflow, steps="12345"))
    assert shown_steps(html) == [*range(1, 11), *range(12_345, 12_345 + step_window.PAGE), *range(19_991, 20_001)]


def test_run_page__shows_at_most_a_page_of_200_steps_however_wide_the_range(admin_client):
    workflow = failed_run(20_000)
    html = opened(admin_client, run_page(workflow, steps="1000:"))
    assert shown_steps(html)[10:-10] == list(range(1000, 1000 + step_window.MOST_ASKED))
    assert f"A page shows {step_window.MOST_ASKED} steps at most." in html


def test_run_page__says_what_is_wrong_with_a_range_it_cannot_read(admin_client):
    workflow = failed_run(20_000)
    html = opened(admin_client, run_page(workflow, steps="ten"))
    assert "is neither a step number nor a range of steps FROM:TO" in html
    assert shown_steps(html) == [*range(1, 11), *range(19_991, 20_001)]


def test_run_page__keeps_the_lists_filters_in_its_links_to_other_steps(admin_client):
    workflow = failed_run(200)
    html = opened(admin_client, run_page(workflow, _changelist_filters="status__exact%3Dfailed"))
    assert 'href="?_changelist_filters=status__exact%3Dfailed&amp;steps=11:60#steps"' in html
    assert '<input type="hidden" name="_changelist_filters" value="status__exact=failed">' in html


def test_run_page__of_a_short_run_shows_every_step_and_no_box_to_find_others(admin_client):
    workflow = failed_run(step_window.WHOLE_UP_TO)
    html = opened(admin_client, run_page(workflow))
    assert shown_steps(html) == list(range(1, step_window.WHOLE_UP_TO + 1))
    assert gaps(html) == [] and 'name="steps"' not in html


def test_run_page__timeline_of_a_long_run_draws_a_bar_a_group_of_steps_in_its_worst_status(admin_client):
    workflow = failed_run(20_000)
    html = opened(admin_client, run_page(workflow))
    timeline = html.split('class="orch-timeline"', 1)[1].split("</fieldset>", 1)[0]
    bars = re.findall(r'class="orch-timeline-bar orch-(\w+)', timeline)
    assert len(bars) == step_window.SPANS
    assert bars[:-1] == ["completed"] * (step_window.SPANS - 1) and bars[-1] == "failed"
    assert 'title="steps 1–400"' in timeline and 'title="steps 19,601–20,000"' in timeline
    assert "20,000 steps, too many to draw one by one" in timeline


def test_run_page__timeline_of_a_short_run_draws_each_step(admin_client):
    workflow = failed_run(12)
    html = opened(admin_client, run_page(workflow))
    timeline = html.split('class="orch-timeline"', 1)[1].split("</fieldset>", 1)[0]
    assert len(re.findall(r'class="orch-timeline-bar ', timeline)) == 12
    assert "too many to draw" not in timeline


# -- the other pages at width -----------------------------------------------------------


@pytest.mark.parametrize("held", [2, 500])
def test_workers_pages__cost_the_same_queries_whatever_the_runs_a_worker_holds(
    admin_client, django_assert_max_num_queries, held
):
    worker = WorkflowWorkerFactory(queues=[WIDE_NAME[:100]] * 20, concurrency=held)
    WorkflowWorkerFactory.create_batch(20)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO workflows (workflow_type, status, queue, input_data, worker_id, current_step, error_message)
            SELECT left(%s, 100), 'running', 'default', '{}', %s, g, %s FROM generate_series(1, %s) g
            """,
            [WIDE_NAME, worker.pk, WIDE_ERROR, held],
        )
    with django_assert_max_num_queries(WORKER_PAGE_QUERIES):
        listed = opened(admin_client, reverse("admin:orchestration_workflowworker_changelist"))
    with django_assert_max_num_queries(WORKER_PAGE_QUERIES):
        page = opened(admin_client, reverse("admin:orchestration_workflowworker_change", args=[worker.pk]))
    assert f"{held} running" in listed
    assert page.count("at step") == min(held, 100)


@pytest.mark.parametrize("queues", [3, 300])
def test_queues_page__costs_the_same_queries_whatever_the_number_of_queues(
    admin_client, django_assert_max_num_queries, queues
):
    WorkflowQueue.objects.bulk_create(
        WorkflowQueue(name=f"{WIDE_NAME[:90]}{n}", concurrency=5, key_concurrency=2, rate_limit="100/m",
                      key_rate_limit="10/s", paused=n % 2 == 0)
        for n in range(queues)
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO workflow_queue_starts (queue, started_at) SELECT left(%s, 90) || (g %% %s), now() "
            "FROM generate_series(1, %s) g",
            [WIDE_NAME, queues, queues * 3],
        )
    with django_assert_max_num_queries(QUEUES_PAGE_QUERIES):
        html = opened(admin_client, reverse("admin:orchestration_workflowqueue_changelist") + "?all=")
    # Its page of rows, each its starts of the last minute, after the registered workflows' queues that sort first.
    before = WorkflowQueue.objects.exclude(rate_limit="100/m").filter(name__lt=WIDE_NAME[:90]).count()
    assert html.count("3 / 100/m") == min(queues, 100 - before)


@pytest.mark.parametrize("types", [3, 300])
def test_overview__costs_the_same_queries_whatever_the_number_of_workflow_types(
    admin_client, django_assert_max_num_queries, types
):
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO workflows (workflow_type, status, queue, input_data, error_message, created_at, started_at,
                                   finished_at)
            SELECT left(%s, 90) || (g %% %s), CASE WHEN g %% 4 = 0 THEN 'failed' ELSE 'completed' END,
                   'default', '{}', CASE WHEN g %% 4 = 0 THEN %s END, now(), now(), now()
            FROM generate_series(1, %s) g
            """,
            [WIDE_NAME, types, WIDE_ERROR, types * 4],
        )
    with django_assert_max_num_queries(OVERVIEW_QUERIES):
        html = opened(admin_client, reverse("admin:orchestration_workflow_overview"))
    assert html.count(f"{WIDE_NAME[:90]}") >= types


@pytest.mark.parametrize("steps", [20, 20_000])
def test_retry_from_step_page__lists_the_first_steps_it_discards_and_counts_the_rest(
    admin_client, django_assert_max_num_queries, steps
):
    workflow = failed_run(steps)
    with django_assert_max_num_queries(RUN_PAGE_QUERIES):
        html = opened(admin_client, reverse("admin:orchestration_workflow_retry_from_step", args=[workflow.pk, 1]))
    assert html.count("<li>step ") == min(steps, views.DISCARDED_SHOWN)
    if steps > views.DISCARDED_SHOWN:
        assert f"and {steps - views.DISCARDED_SHOWN:,} more, to step {steps:,}" in html
