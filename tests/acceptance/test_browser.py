"""The operator's console in a real Chromium, against a live server.

Debian's ``chromium`` (installed by ``.ci/run`` when missing) driven by
Playwright for Python; Playwright's own browser downloads are never used.
Screenshots land in ``test-artifacts/screenshots/`` for a person to look at.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.urls import reverse

from orchestration import start_workflow
from orchestration.models import Workflow
from tests.admin_support import (
    WIDE_ERROR,
    WIDE_NAME,
    failed_three_steps,
    record_steps,
    staff_user,
    stuck_running,
    waiting_for_event,
)
from tests.factories import WorkflowFactory, WorkflowWorkerFactory
from tests.support import ROOT, drain

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.browser,
    # One Chromium at a time, after the parallel part of make test: three of them
    # rendering side by side on two cores missed the 10 s a page gets.
    pytest.mark.serial,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="no Chromium at /usr/bin/chromium (Debian's 'chromium' package; .ci/run installs it when run as root)",
    ),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop on this thread, which Django
    # takes for an async context; the tests' ORM calls are plain synchronous code.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    context.close()


def log_in(page: Any, username: str, password: str) -> None:
    page.goto(reverse("admin:login"))
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    path.unlink(missing_ok=True)
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5_000
    return path


def test_operator__filters_failed_workflows_retries_one_and_watches_it_complete(page, admin_user):
    failed = failed_three_steps()
    other = failed_three_steps()
    log_in(page, "admin", "password")
    page.goto(reverse("admin:orchestration_workflow_changelist"))
    page.click("#changelist-filter a:text-is('failed (2)')")
    page.wait_for_url(re.compile(r"status__exact=failed"))
    badges = page.locator("#result_list .orch-badge")
    assert badges.all_inner_texts() == ["failed", "failed"]
    screenshot(page, "01-failed-workflows")

    row = page.locator("#result_list tr", has_text=str(failed.pk)[-8:])
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "retry_workflows")
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist")
    assert "1 workflow(s) retried; 0 skipped" in page.inner_text(".messagelist")
    # Still filtered on failed: the retried workflow has left the list, and the message links to it.
    assert page.locator("#result_list .orch-badge").all_inner_texts() == ["failed"]
    screenshot(page, "02-retried")

    page.click(f".messagelist a:text-is('{str(failed.pk)[-8:]}')")
    assert page.inner_text(".field-status_label .orch-badge") == "pending"
    page.evaluate("document.getElementById('orch-live').dataset.seconds = '0.3'")
    page.uncheck("#orch-live")
    page.check("#orch-live")
    assert drain() == ["completed"]  # a worker picks it up; the page, live, follows without a reload
    page.wait_for_selector(".field-status_label .orch-badge:text-is('completed')")
    screenshot(page, "03-completed")
    other.refresh_from_db()
    assert other.status == "failed"


def test_operator__sees_a_workflows_steps_on_its_timeline(page, admin_user):
    workflow = failed_three_steps()
    log_in(page, "admin", "password")
    page.goto(reverse("admin:orchestration_workflow_changelist"))
    page.click(f"#result_list a:has-text('{str(workflow.pk)[-8:]}')")
    page.wait_for_selector(".orch-timeline")
    bars = page.locator(".orch-timeline-bar")
    assert bars.count() == 2
    first, second = bars.nth(0).bounding_box(), bars.nth(1).bounding_box()
    track = page.locator(".orch-timeline-track").nth(1).bounding_box()
    # Step 1 took 2 s and step 2 took 7 s of the 9 s the workflow ran, one after the other.
    assert first["width"] == pytest.approx(track["width"] * 2 / 9, abs=2)
    assert second["width"] == pytest.approx(track["width"] * 7 / 9, abs=2)
    assert second["x"] == pytest.approx(first["x"] + first["width"], abs=2)
    assert "orch-failed" in bars.nth(1).get_attribute("class")
    assert page.locator("tr.orch-step-row").count() == 2
    assert "ConnectionError: bank API unreachable" in page.inner_text("#content-main")
    screenshot(page, "04-workflow-timeline")


def test_operator__finds_a_step_of_a_run_of_thousands_by_its_number(page, admin_user):
    workflow = WorkflowFactory(status="failed", current_step=1_999)
    record_steps(workflow, 2_000, failed_at=2_000)
    log_in(page, "admin", "password")
    page.goto(reverse("admin:orchestration_workflow_change", args=[workflow.pk]))
    rows = page.locator("tr.orch-step-row")
    assert rows.count() == 20 and page.locator("tr.orch-steps-gap").count() == 1
    assert page.locator(".orch-timeline-bar").count() == 50  # a bar a group of 40 steps
    page.fill("#steps-group input[name=steps]", "1234")
    page.press("#steps-group input[name=steps]", "Enter")
    page.wait_for_selector("tr.orch-step-row[data-step='1234']")
    assert rows.count() == 70 and "steps=1234" in page.url
    screenshot(page, "13-long-run-jumped")
    page.click("tr.orch-steps-gap a:has-text('show 1,284–1,333')")  # the page after
    page.wait_for_selector("tr.orch-step-row[data-step='1333']")


def test_operator__skips_a_failed_step_by_supplying_its_output(page, admin_user):
    workflow = failed_three_steps()
    log_in(page, "admin", "password")
    page.goto(reverse("admin:orchestration_workflow_change", args=[workflow.pk]))
    page.click("a.orch-step-skip")
    page.fill("textarea[name=output]", "{not json")
    page.click("input[type=submit]")
    assert "Not valid JSON" in page.inner_text(".errorlist")
    page.fill("textarea[name=output]", '{"step": 2, "label": "done by hand"}')
    screenshot(page, "05-skip-step")
    page.click("input[type=submit]")
    page.wait_for_selector(".messagelist")
    assert "Step 2 (second) recorded as completed" in page.inner_text(".messagelist")
    assert page.inner_text(".field-status_label .orch-badge") == "pending"
    assert drain() == ["completed"]


def test_operator__reads_the_overview_and_its_chart(page, admin_user):
    failed_three_steps()
    workflow = failed_three_steps()
    log_in(page, "admin", "password")
    page.goto(reverse("admin:orchestration_workflow_change", args=[workflow.pk]))
    page.click("a.orch-step-retry >> nth=1")
    page.click("input[type=submit]")
    drain()  # the retried one completes, the other stays failed
    page.goto(reverse("admin:orchestration_workflow_changelist"))
    page.click("a.orch-overview-link")
    page.wait_for_selector("svg.orch-chart")
    assert page.locator("svg.orch-chart rect.orch-bar-completed").count() == 24
    chart, panel = page.locator("svg.orch-chart").bounding_box(), page.locator("#orch-hourly").bounding_box()
    assert chart["width"] >= 0.95 * panel["width"] - 20  # across its panel, not half of it
    current_hour = page.locator("svg.orch-chart g.orch-hour").last
    completed = current_hour.locator("rect.orch-bar-completed").bounding_box()
    failed = current_hour.locator("rect.orch-bar-failed").bounding_box()
    assert completed["height"] > 10 and failed["height"] > 10
    assert "completed (1)" in page.inner_text("#orch-hourly") and "failed (1)" in page.inner_text("#orch-hourly")
    assert "three_steps" in page.inner_text("#orch-success")
    assert "workflow_steps" in page.inner_text("#orch-health")
    screenshot(page, "06-overview")


def test_operator__approves_a_waiting_workflow_by_sending_its_event(page, admin_user):
    workflow = start_workflow("awaits_approval")
    assert drain() == ["waiting"]
    log_in(page, "admin", "password")
    page.goto(reverse("admin:orchestration_workflow_changelist") + "?pending=event")
    row = page.locator("#result_list tr", has_text=str(workflow.pk)[-8:])
    assert row.locator(".orch-badge").inner_text() == "waiting"
    assert "event: approval" in row.inner_text() and "until woken" in row.inner_text()
    screenshot(page, "08-waiting-workflows")

    row.locator(f"a:has-text('{str(workflow.pk)[-8:]}')").click()
    page.wait_for_selector("#orch-send-event.orch-awaited textarea[name=payload]")
    form = page.locator("#orch-send-event.orch-awaited")
    assert form.locator("input[name=name]").input_value() == "approval"
    screenshot(page, "09-waiting-for-an-event")
    form.locator("textarea[name=payload]").fill("{approved: yes}")
    form.locator("input[type=submit]").click()
    assert "Not valid JSON" in page.inner_text(".errorlist")
    page.fill("textarea[name=payload]", '{"approved": true, "by": "grace@example.com"}')
    screenshot(page, "10-send-event-corrected")
    page.click("input[name=_send_event]")
    page.wait_for_selector(".messagelist")
    assert "Event 'approval' sent" in page.inner_text(".messagelist")
    assert page.locator("#orch-send-event.orch-awaited").count() == 0

    assert drain() == ["completed"]  # a worker resumes it
    page.reload()
    assert page.inner_text(".field-status_label .orch-badge") == "completed"
    assert '"by": "grace@example.com"' in page.inner_text(".field-output_json")
    screenshot(page, "11-approved")


def test_operator_without_permissions__sees_the_list_but_no_action(page, db):
    failed_three_steps()
    staff_user("view_workflow", username="watcher", password="watcher-pw")
    log_in(page, "watcher", "watcher-pw")
    page.goto(reverse("admin:orchestration_workflow_changelist"))
    assert page.locator("#result_list .orch-badge").count() == 1
    assert page.locator("select[name=action]").count() == 0
    screenshot(page, "07-view-only")


# -- the second pass (issue 17): 1280 px, the run page's buttons, live refresh ------------


def fits_its_width(page: Any, selector: str) -> bool:
    return page.evaluate(
        f"(() => {{ const e = document.querySelector('{selector}'); return e.scrollWidth <= e.clientWidth; }})()"
    )


def test_operator__reads_the_list_at_1280_px_without_scrolling_sideways(page, admin_user):
    page.set_viewport_size({"width": 1280, "height": 900})
    for _ in range(3):
        workflow = failed_three_steps()
        Workflow.objects.filter(pk=workflow.pk).update(error_message="ConnectionError: " + "bank unreachable " * 30)
    waiting_for_event("manager approval")
    stuck_running(workflow_type="a_rather_long_workflow_type_name")
    log_in(page, "admin", "password")
    page.goto(reverse("admin:orchestration_workflow_changelist"))
    screenshot(page, "12-list-at-1280")
    assert fits_its_width(page, "#changelist .results") and fits_its_width(page, "html")
    for column in ("id", "status", "type", "progress", "last error", "age", "duration"):
        header = page.locator(f"#result_list thead th:has-text('{column}')").first.bounding_box()
        assert header["x"] + header["width"] <= 1280, column
    error = page.locator("#result_list .orch-error-line").first.bounding_box()
    assert error["height"] < 25  # one line, cut


def test_operator__retries_a_failed_run_from_the_buttons_at_the_top_of_its_page(page, admin_user):
    page.set_viewport_size({"width": 1280, "height": 900})
    workflow = failed_three_steps()
    log_in(page, "admin", "password")
    page.goto(reverse("admin:orchestration_workflow_change", args=[workflow.pk]))
    retry = page.locator("#orch-summary button.orch-run-retry")
    box = retry.bounding_box()
    assert box["y"] + box["height"] < 900 and box["x"] + box["width"] < 1280  # seen without scrolling
    assert "Failed at step 2 (second)" in page.inner_text("#orch-summary")
    # The step repairs sit beside each step's status, whole, not cut off at the table's right edge.
    steps = page.locator(".inline-group .wrapper").bounding_box()
    for repair in page.locator("a.orch-step-retry, a.orch-step-skip").all():
        box = repair.bounding_box()
        assert box["x"] + box["width"] <= min(steps["x"] + steps["width"], 1280)
    retry.click()
    page.wait_for_selector(".messagelist")
    assert "is pending again" in page.inner_text(".messagelist")
    assert page.inner_text("#orch-summary .orch-badge") == "pending"


def test_operator__watches_a_run_move_step_by_step_without_reloading(page, admin_user):
    workflow = start_workflow("slow", {"steps": 3, "seconds": 1.0})
    log_in(page, "admin", "password")
    page.goto(reverse("admin:orchestration_workflow_change", args=[workflow.pk]))
    assert page.is_checked("#orch-live")
    page.evaluate("window.notReloaded = true; document.getElementById('orch-live').dataset.seconds = '0.2'")
    page.uncheck("#orch-live")
    page.check("#orch-live")  # on again, every 0.2 s
    worker = threading.Thread(target=drain_in_own_connection)
    worker.start()
    seen: list[str] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        # The badge first: a refresh between the two reads then shows steps at least as far on.
        finished = page.inner_text("#orch-summary .orch-badge") == "completed"
        steps = page.inner_text(".fieldBox.field-steps_label .readonly")
        if not seen or seen[-1] != steps:
            seen.append(steps)
        if finished:
            break
        time.sleep(0.05)
    worker.join()
    assert page.inner_text("#orch-summary .orch-badge") == "completed"
    assert page.evaluate("window.notReloaded") is True
    running = [text for text in seen if "running step" in text]
    assert len(running) >= 2, seen  # step by step, in order
    assert running == sorted(running) and seen[-1] == "3 completed"


def drain_in_own_connection() -> None:
    try:
        drain(hurry_retries=False)
    finally:
        connection.close()


# -- the third pass (issue 41): every console page fits 1280 x 800 ----------------------


def no_table_clipped(page: Any) -> list[str]:
    """The tables wider than the box that holds them (cut off, or scrolled inside it)."""
    return page.evaluate(
        "[...document.querySelectorAll('#content table')].filter(t => t.parentElement.scrollWidth > "
        "t.parentElement.clientWidth + 1).map(t => t.id || t.parentElement.id || t.parentElement.className)"
    )


def at_1280(page: Any, url: str, shot: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(url)
    screenshot(page, shot)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert no_table_clipped(page) == []


def test_operator__reads_the_overview_at_1280_px_without_scrolling_sideways(page, admin_user):
    for _ in range(3):
        workflow = failed_three_steps()
        Workflow.objects.filter(pk=workflow.pk).update(error_message=WIDE_ERROR, workflow_type=WIDE_NAME[:100])
    stuck_running(workflow_type=WIDE_NAME[:100])
    WorkflowWorkerFactory(queues=[WIDE_NAME[:100]] * 3)
    log_in(page, "admin", "password")
    at_1280(page, reverse("admin:orchestration_workflow_overview"), "13-overview-at-1280")
    error = page.locator("#orch-failures .orch-error-line").first.bounding_box()
    assert error["height"] > 25  # the error wraps onto lines of its own


def test_operator__reads_the_workers_page_at_1280_px_with_every_column_and_live_refresh(page, admin_user):
    WorkflowWorkerFactory.create_batch(3, queues=[WIDE_NAME[:100], "default"], host="ip-10-0-12-34." * 3)
    log_in(page, "admin", "password")
    at_1280(page, reverse("admin:orchestration_workflowworker_changelist"), "14-workers-at-1280")
    for column in ("started", "last heartbeat"):
        header = page.locator(f"#result_list thead th:has-text('{column}')").first.bounding_box()
        assert header["x"] + header["width"] <= 1280, column
    assert page.is_checked("#orch-live")


def test_operator__reads_the_queues_page_at_1280_px_and_pauses_a_queue_only_runs_name(page, admin_user):
    WorkflowFactory(queue="default", status="completed")
    WorkflowFactory(queue=WIDE_NAME[:100], status="pending")
    log_in(page, "admin", "password")
    at_1280(page, reverse("admin:orchestration_workflowqueue_changelist"), "15-queues-at-1280")
    assert page.is_checked("#orch-live")
    row = page.locator("#result_list tr", has_text="default").first
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "pause_queues")
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist")
    assert "Paused: default" in page.inner_text(".messagelist")
    assert page.locator("#result_list tr", has_text="default").first.locator(".orch-badge").inner_text() == "paused"
