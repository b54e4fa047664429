"""Enqueue the demo workflows, run them with ``runworkers --burst``, print a report."""

from __future__ import annotations

import datetime
import math
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db.models import Count, Min, Q
from django.utils import timezone

from orchestration import send_event, start_workflow
from orchestration.models import StepStatus, Workflow, WorkflowStatus
from orchestration.waits import waiting_for_event

#: The statuses in the summary, in this order.
SUMMARY_ORDER = ("completed", "failed", "cancelled", "running", "pending")

#: How long the failed payout's bank stays "down" after the demo starts.
BANK_DOWNTIME = datetime.timedelta(seconds=60)


class Command(BaseCommand):
    help = "Run the demo: start sample workflows, process them with runworkers --burst, report what happened."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--orders", type=int, default=3)
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds before giving up")

    def handle(self, *args: Any, **options: Any) -> None:
        self._ensure_demo_user()
        run_id = uuid.uuid4().hex[:8]
        # The bank is "down" for a minute: retries run out, the workflow fails,
        # and an operator who retries it from the admin afterwards sees it complete.
        bank_down_until = timezone.now() + BANK_DOWNTIME
        started = self._enqueue(run_id, options["orders"], bank_down_until)
        self.stdout.write(
            f"Started {len(started)} workflows (demo run {run_id}); running them with runworkers --burst\n"
        )
        self._run_workers(started, options["timeout"])
        self._report(started, bank_down_until)

    def _ensure_demo_user(self) -> None:
        from django.contrib.auth import get_user_model

        user_model = get_user_model()
        # A known password belongs only in the checkout's own embedded database, never in one DATABASE_URL names.
        if getattr(settings, "EMBEDDED_DATABASE", False) and not user_model.objects.filter(username="demo").exists():
            user_model.objects.create_superuser("demo", "demo@example.com", "demo")

    def _enqueue(self, run_id: str, orders: int, bank_down_until: datetime.datetime) -> list[Workflow]:
        started = []
        for n in range(1, orders + 1):
            items = [{"sku": f"SKU-{n}{i}", "quantity": i + 1, "unit_price_cents": 1250 * (i + 1)} for i in range(n)]
            started.append(
                start_workflow(
                    "order_fulfilment",
                    {"order_id": 1000 + n, "email": f"customer{n}@example.com", "items": items},
                    idempotency_key=f"demo-{run_id}-order-{n}",
                )
            )
        started.append(start_workflow("crm_sync", {"contact_id": 42, "fail_attempts": 2}))
        invoice = {"number": "INV-7", "lines": [{"amount_cents": 12000}, {"amount_cents": 3000}], "total_cents": 15000}
        started.append(
            start_workflow(
                "supplier_payout",
                {"supplier": "Acme Paper", "invoice": invoice, "bank_down_until": bank_down_until.isoformat()},
            )
        )
        started.append(
            start_workflow(
                "expense_approval", {"employee": "Ada", "amount_cents": 4200}, idempotency_key=f"demo-{run_id}-expense"
            )
        )
        return started

    def _approve_waiting_expenses(self, ids: list[Any]) -> None:
        """Play the manager: answer expense workflows that wait for approval."""
        waiting = Workflow.objects.filter(pk__in=ids, waiting_for=waiting_for_event("manager approval"))
        for workflow in waiting:
            send_event(workflow.pk, "manager approval", {"approved": True, "by": "grace@example.com"})
            self.stdout.write(f"Sent event 'manager approval' to waiting workflow {workflow.pk}\n")

    def _run_workers(self, started: list[Workflow], timeout: float) -> None:
        """Run burst workers until every demo workflow is finished; a retry due
        later is picked up by the next burst, as it would be in production."""
        ids = [workflow.pk for workflow in started]
        env = {**os.environ, "ORCHESTRATION_RETRY_BACKOFF": "0.3", "ORCHESTRATION_RETRY_BACKOFF_MAX": "2"}
        if "NAME" in settings.DATABASES["default"]:
            env["DATABASE_NAME"] = str(settings.DATABASES["default"]["NAME"])
        deadline = time.monotonic() + timeout
        command = [sys.executable, "manage.py", "runworkers", "--burst", "--concurrency", "4"]
        while time.monotonic() < deadline:
            subprocess.run(command, env=env, check=True, cwd=settings.BASE_DIR)
            self._approve_waiting_expenses(ids)
            unfinished = Workflow.objects.filter(
                pk__in=ids, status__in=[WorkflowStatus.PENDING, WorkflowStatus.RUNNING]
            )
            if not unfinished.exists():
                return
            next_due = unfinished.filter(waiting_for__isnull=True).aggregate(due=Min("run_after"))["due"]
            wait = (next_due - timezone.now()).total_seconds() if next_due else 0.1
            time.sleep(min(max(wait, 0.05), 5.0))
        self.stderr.write("Timed out waiting for the demo workflows to finish.")

    def _report(self, started: list[Workflow], bank_down_until: datetime.datetime) -> None:
        rows = report_rows([workflow.pk for workflow in started])
        self.stdout.write("\nDemo report\n")
        header = f"{'workflow':<36} {'type':<18} {'status':<10} {'attempts':>8} {'steps done/run':>14}  detail"
        self.stdout.write(header + "\n" + "-" * len(header))
        for workflow in rows:
            self.stdout.write(report_line(workflow))
        self.stdout.write(f"\n{summary(rows)}\n")
        embedded = getattr(settings, "EMBEDDED_DATABASE", False)
        login = "user demo, password demo" if embedded else "a user of yours: manage.py createsuperuser"
        self.stdout.write(
            "See them in the admin: run `make serve`, open http://127.0.0.1:8000/admin/ "
            f"({login}), then retry the failed payout {bank_back_at(bank_down_until)}.\n"
        )


def report_rows(ids: list[Any]) -> list[Workflow]:
    """The demo's runs in the order started, each with the steps it ran and completed."""
    done = Count("steps", filter=Q(steps__status=StepStatus.COMPLETED))
    runs = Workflow.objects.filter(pk__in=ids).annotate(steps_run=Count("steps"), steps_done=done)
    return list(runs.order_by("created_at"))


def report_line(workflow: Any) -> str:
    """A run's line: the steps column counts the steps completed and the steps run
    (``current_step`` is only the last completed one: a run whose second step
    failed ran two)."""
    detail = workflow.error_message if workflow.status == WorkflowStatus.FAILED else workflow.output_data
    steps = f"{workflow.steps_done}/{workflow.steps_run}"
    return (
        f"{workflow.pk!s:<36} {workflow.workflow_type:<18} {workflow.status:<10} "
        f"{workflow.attempts:>8} {steps:>14}  {detail}"
    )


def summary(rows: list[Workflow]) -> str:
    """The runs counted by status, parts that add up to the whole, and how many
    of each status took more than one attempt (a count across them, not a part):
    "6 workflows: 5 completed, 1 failed; 2 took more than one attempt (1 completed, 1 failed)"."""
    by_status = Counter(row.status for row in rows)
    retried = Counter(row.status for row in rows if row.attempts > 1)
    statuses = [status for status in SUMMARY_ORDER if by_status[status]]
    text = f"{len(rows)} workflows: " + ", ".join(f"{by_status[status]} {status}" for status in statuses)
    if retried:
        parts = ", ".join(f"{retried[status]} {status}" for status in statuses if retried[status])
        text += f"; {sum(retried.values())} took more than one attempt ({parts})"
    return text


def bank_back_at(bank_down_until: datetime.datetime) -> str:
    """When a retry of the failed payout succeeds: a time as the admin shows
    times (Django's time zone, which Django also makes this process's), and how
    far off it is, for a reader whose clock is in another zone."""
    left = (bank_down_until - timezone.now()).total_seconds()
    if left <= 0:
        return "(its bank is back up: a retry succeeds now)"
    back = timezone.localtime(bank_down_until)
    return (
        f"from {back:%H:%M:%S} {back.tzname()} on, {math.ceil(left)} s from now "
        "(its bank is down until then, so a retry before that fails again)"
    )
