"""Rows and users for the admin tests (test client and browser)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.utils import timezone

from orchestration import waits
from orchestration.models import Workflow
from orchestration.reports import stats
from orchestration.reports.listing import ERROR_INDEX
from tests.factories import WorkflowFactory, WorkflowStepFactory

WIDE_NAME = "import the customer ledger and reconcile each account against the bank statement " * 2
WIDE_ERROR = "ConnectionError: the supplier API did not answer in time; " * 20


def record_steps(workflow, count: int, *, status: str = "completed", failed_at: int | None = None) -> None:
    """``count`` steps of ``workflow``, each with a wide name and output, a second apart
    (``failed_at``: that step failed, with a long error, and is the last one recorded)."""
    last = failed_at or count
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, output_data, started_at,
                                        completed_at, attempts, error_message)
            SELECT %(id)s, g, left(%(name)s || g, 200),
                   CASE WHEN g = %(failed)s THEN 'failed' ELSE %(status)s END,
                   CASE WHEN g <> %(failed)s THEN jsonb_build_object('n', g, 'rows', repeat('x', 400)) END,
                   now() - interval '1 day' + g * interval '1 s',
                   now() - interval '1 day' + g * interval '1 s' + interval '900 ms',
                   1 + g %% 2,
                   CASE WHEN g = %(failed)s THEN %(error)s END
            FROM generate_series(1, %(last)s) g
            """,
            {"id": str(workflow.pk), "name": WIDE_NAME, "status": status, "failed": failed_at or 0,
             "error": WIDE_ERROR, "last": last},
        )  # fmt: skip


def record_children(parent, count: int) -> None:
    """``count`` wide children of ``parent`` in one statement: two in three completed, one failed."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO workflows (workflow_type, status, queue, input_data, parent_id, error_message)
            SELECT left(%s, 100), CASE WHEN g %% 3 = 0 THEN 'failed' ELSE 'completed' END, 'default',
                   jsonb_build_object('n', g), %s, CASE WHEN g %% 3 = 0 THEN %s END
            FROM generate_series(1, %s) g
            """,
            [WIDE_NAME, str(parent.pk), WIDE_ERROR, count],
        )


def staff_user(*codenames: str, username: str = "operator", password: str = "operator-pw") -> User:
    """A staff user (not a superuser) holding only the orchestration permissions named."""
    user = User.objects.create_user(username, password=password, is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="orchestration", codename__in=codenames)
    )
    return user


def failed_three_steps(**fields: Any) -> Workflow:
    """A ``three_steps`` run that completed step 1 (2 s) and failed at step 2 (7 s), as a worker leaves it."""
    # It failed just now, so it counts in the current hour of the overview's chart.
    started = timezone.now() - datetime.timedelta(seconds=9)
    workflow = WorkflowFactory(
        workflow_type="three_steps",
        status="failed",
        attempts=4,
        current_step=1,
        input_data={"order": 7, "items": ["a", "b"]},
        error_message="ConnectionError: bank API unreachable",
        error_traceback="Traceback (most recent call last):\n  ...\nConnectionError: bank API unreachable",
        started_at=started,
        finished_at=started + datetime.timedelta(seconds=9),
        **fields,
    )
    WorkflowStepFactory(
        workflow=workflow,
        step_number=1,
        step_name="first",
        status="completed",
        output_data={"step": 1, "label": "first"},
        started_at=started,
        completed_at=started + datetime.timedelta(seconds=2),
        attempts=1,
    )
    WorkflowStepFactory(
        workflow=workflow,
        step_number=2,
        step_name="second",
        status="failed",
        output_data=None,
        error_message="ConnectionError: bank API unreachable",
        started_at=started + datetime.timedelta(seconds=2),
        completed_at=started + datetime.timedelta(seconds=9),
        attempts=4,
    )
    return workflow


def stuck_running(seconds_since_heartbeat: float = 600, **fields: Any) -> Workflow:
    """A running workflow whose worker last heartbeated that long ago, at its first step."""
    workflow = WorkflowFactory(status="running", attempts=1, started_at=timezone.now(), **fields)
    WorkflowStepFactory(
        workflow=workflow, step_number=1, step_name="first", status="running", started_at=timezone.now()
    )
    Workflow.objects.filter(pk=workflow.pk).update(
        updated_at=timezone.now() - datetime.timedelta(seconds=seconds_since_heartbeat)
    )
    workflow.refresh_from_db()
    return workflow


def waiting_for_event(
    name: str = "approval", run_after: datetime.datetime | None = None, *, woken: bool = False, **fields
) -> Workflow:
    """A workflow as ``ctx.wait_for_event(name)`` leaves it: pending until woken (or until
    ``run_after``, its timeout), its step 1 waiting. ``woken``: as ``send_event`` leaves it."""
    workflow = WorkflowFactory(
        workflow_type="awaits_approval",
        status="pending",
        waiting_for=f"event: {name}",
        run_after=None if woken else run_after or waits.WAIT_FOREVER,
        started_at=timezone.now(),
        **fields,
    )
    WorkflowStepFactory(
        workflow=workflow,
        step_number=1,
        step_name=name,
        status="pending",
        output_data={"event": name, "timeout_at": run_after.isoformat() if run_after else None},
        started_at=timezone.now(),
    )
    return workflow


def require_error_index() -> None:
    """Skip the test where migration 0011 made no error index: the server has no pg_trgm (some embedded builds)."""
    if not stats.has_index(ERROR_INDEX):
        pytest.skip("no pg_trgm on this PostgreSQL: the console's search leaves error messages out")
