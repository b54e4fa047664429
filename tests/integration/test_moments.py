"""Moments given to the API under either ``USE_TZ``: naive means local time in
``TIME_ZONE`` without time zones, as Django's ORM reads it, and is refused with
advice that works when ``USE_TZ = True``. CI runs this module under both
settings (``make test-naive-time`` for ``USE_TZ = False``)."""

from __future__ import annotations

import datetime
import io
import json
import zoneinfo

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from orchestration import InvalidWorkflowInput, start_workflow, start_workflows
from orchestration.models import Workflow
from tests.factories import WorkflowFactory
from tests.support import drain

pytestmark = [pytest.mark.django_db, pytest.mark.moments]

without_time_zones = pytest.mark.skipif(settings.USE_TZ, reason="USE_TZ = False only: make test-naive-time")
with_time_zones = pytest.mark.skipif(not settings.USE_TZ, reason="USE_TZ = True only")


def stored_in_utc(workflow: Workflow, column: str = "run_after") -> datetime.datetime:
    """The instant the row holds, read by PostgreSQL itself in UTC (naive)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} AT TIME ZONE 'UTC' FROM workflows WHERE id = %s", [workflow.pk])
        return cursor.fetchone()[0]


def test_start_workflow__run_after_the_advised_way_waits_until_then():
    workflow = start_workflow("three_steps", run_after=timezone.now() + datetime.timedelta(hours=1))
    assert drain(hurry_retries=False) == []
    assert Workflow.objects.get(pk=workflow.pk).status == "pending"


def test_start_workflow__run_after_in_the_past_is_due_now():
    workflow = start_workflow("three_steps", run_after=timezone.now() - datetime.timedelta(minutes=1))
    assert drain() == ["completed"]
    assert Workflow.objects.get(pk=workflow.pk).status == "completed"


def test_start_workflow__an_aware_run_after_is_that_instant_whatever_use_tz():
    at = datetime.datetime(2030, 1, 1, 9, 0, tzinfo=zoneinfo.ZoneInfo("Asia/Tokyo"))
    workflow = start_workflow("three_steps", run_after=at)
    assert stored_in_utc(workflow) == datetime.datetime(2030, 1, 1, 0, 0)


@without_time_zones
def test_start_workflow__a_naive_run_after_without_time_zones_is_local_time_in_time_zone():
    workflow = start_workflow("three_steps", run_after=datetime.datetime(2030, 1, 1, 9, 0))
    local = datetime.datetime(2030, 1, 1, 9, 0, tzinfo=zoneinfo.ZoneInfo(settings.TIME_ZONE))
    assert stored_in_utc(workflow) == local.astimezone(datetime.UTC).replace(tzinfo=None)
    assert Workflow.objects.get(pk=workflow.pk).run_after == datetime.datetime(2030, 1, 1, 9, 0)


@without_time_zones
def test_start_workflows__a_naive_run_after_without_time_zones_holds_for_every_run():
    later = timezone.now() + datetime.timedelta(hours=1)
    runs = start_workflows("three_steps", [{}, {}], run_after=later)
    assert drain(hurry_retries=False) == []
    assert {run.run_after for run in Workflow.objects.filter(pk__in=[r.pk for r in runs])} == {later}


@without_time_zones
def test_start_workflow__a_timeout_without_time_zones_sets_its_deadline_in_time_zone():
    workflow = start_workflow("three_steps", timeout=3600)
    deadline = Workflow.objects.get(pk=workflow.pk).deadline
    assert timezone.is_naive(deadline)
    assert abs(deadline - (timezone.now() + datetime.timedelta(hours=1))) < datetime.timedelta(minutes=1)


@with_time_zones
def test_start_workflow__a_naive_run_after_with_time_zones_is_refused_with_advice():
    with pytest.raises(InvalidWorkflowInput) as refused:
        start_workflow("three_steps", run_after=datetime.datetime(2030, 1, 1, 9, 0))
    message = str(refused.value)
    assert "naive" in message and "USE_TZ = True" in message
    assert "django.utils.timezone.now() + timedelta(hours=1)" in message and "make_aware" in message
    assert not Workflow.objects.exists()


@with_time_zones
def test_start_workflow__a_naive_run_after_made_aware_as_advised_is_accepted():
    workflow = start_workflow("three_steps", run_after=timezone.make_aware(datetime.datetime(2030, 1, 1, 9, 0)))
    local = datetime.datetime(2030, 1, 1, 9, 0, tzinfo=zoneinfo.ZoneInfo(settings.TIME_ZONE))
    assert stored_in_utc(workflow) == local.astimezone(datetime.UTC).replace(tzinfo=None)


def test_start_workflow__a_run_after_that_is_no_datetime_is_refused():
    with pytest.raises(InvalidWorkflowInput, match="run_after must be a datetime, not str"):
        start_workflow("three_steps", run_after="2030-01-01")


def test_workflows_list__since_a_typed_date_is_midnight_in_time_zone():
    zone = zoneinfo.ZoneInfo(settings.TIME_ZONE)
    midnight = datetime.datetime(2030, 1, 2, tzinfo=zone)
    before = WorkflowFactory(created_at=midnight - datetime.timedelta(minutes=1))
    after = WorkflowFactory(created_at=midnight + datetime.timedelta(minutes=1))
    out = io.StringIO()
    call_command("workflows", "list", "--since", "2030-01-02", "--json", stdout=out, stderr=io.StringIO())
    listed = {row["id"] for row in json.loads(out.getvalue())}
    assert str(after.pk) in listed and str(before.pk) not in listed
