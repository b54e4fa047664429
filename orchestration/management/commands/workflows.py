"""``manage.py workflows list|show|workers|retry|restart|cancel|send-event|pause|resume|schedules|health``:
the operator's console from a shell, each verb with ``--json``.

A shell over ``orchestration.reports.listing`` (the admin list's filters and search)
and ``orchestration.api`` (the same repairs as the admin's actions). Exit
status (docs/reference/commands.md's table): 0 done; 2 a bad argument (an
id, a filter, a payload, an unknown queue); 3 no such workflow; 4 refused in
its state (the message says why); 1 anything else (a statement timeout, say).
``health`` exits 0 when every check passes, 1 otherwise
(``orchestration.health``). ``pause`` and ``resume`` pause and resume runs
given by their whole ids; given one queue's name instead, they are
``workflow_queues pause|resume``. ``schedules list|pause|resume|run-now``
lists the cron schedules (``orchestration.reports.schedules``) and changes
them by name (``orchestration.schedules.api``); 3 for an unknown name.
"""

from __future__ import annotations

import argparse
import datetime
import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.serializers.json import DjangoJSONEncoder
from django.db import OperationalError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from orchestration import api, health, moments
from orchestration.errors import (
    InvalidSchedule,
    InvalidTransition,
    InvalidWorkflowInput,
    UnknownSchedule,
    UnknownWorkflowType,
)
from orchestration.management.arguments import POSITIVE_SECONDS, USAGE, Bounded
from orchestration.management.commands import workflow_queues
from orchestration.management.json_errors import JsonErrors, already_reported
from orchestration.management.outage import ReportsOutages
from orchestration.models import Workflow
from orchestration.reports import listing, stats, step_window
from orchestration.reports.schedules import rows as schedule_rows
from orchestration.schedules import api as schedule_api
from orchestration.terminal import printable
from orchestration.validation import dumps_for_display
from orchestration.waits import Wait

BAD_ARGUMENT, NOT_FOUND, REFUSED = USAGE, 3, 4

#: What ``pause`` and ``resume`` do to runs; ``workflow_queues.PAUSE_HELP`` says what they do to a queue.
RUN_PAUSE_HELP = {
    "pause": "Pause pending or running workflows: no worker claims them, and a running one stops at its next "
    "step boundary, its completed steps kept.",
    "resume": "Resume paused workflows: they go on after their last completed step.",
}

#: What ``schedules`` does: list them, or change the ones named.
SCHEDULE_ACTIONS = ("list", "pause", "resume", "run-now")

#: Seconds a read may take before PostgreSQL cancels it (``--timeout``).
READ_TIME_LIMIT = 30.0
#: Seconds each health check may take, connecting included (``health --timeout``).
HEALTH_TIME_LIMIT = health.TIMEOUT


def _since(value: str) -> datetime.datetime:
    """An ISO date or moment, or an age: ``90m``, ``6h``, ``7d``."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if value[-1:] in units and value[:-1].replace(".", "", 1).isdigit():
        return timezone.now() - datetime.timedelta(seconds=float(value[:-1]) * units[value[-1]])
    try:
        moment = parse_datetime(value) or parse_datetime(f"{value}T00:00:00")
    except ValueError:
        moment = None
    if moment is None:
        raise argparse.ArgumentTypeError(f"{value!r} is neither a date, a moment (ISO 8601) nor an age (90m, 6h, 7d)")
    return moments.typed(moment)


def _steps(value: str) -> tuple[int, int | None]:
    try:
        return step_window.parse_range(value)
    except step_window.InvalidRange as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Command(JsonErrors, ReportsOutages):
    help = (
        "Watch and repair workflows: list, show, workers, retry, restart, cancel, send-event, pause, resume; schedules."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB", parser_class=type(parser))
        common: dict[str, Any] = {"called_from_command_line": getattr(parser, "called_from_command_line", None)}

        def verb(name: str, help: str) -> CommandParser:
            sub = verbs.add_parser(name, help=help, description=help, **common)
            sub.add_argument("--json", action="store_true", help="print JSON, for scripts")
            sub.add_argument("--timeout", **POSITIVE_SECONDS, default=READ_TIME_LIMIT, help="seconds a read may take")
            return sub

        found = verb("list", "Workflows, newest first, with the admin list's filters.")
        found.add_argument("--status", help="pending, running, paused, completed, failed or cancelled")
        found.add_argument(
            "--pending", metavar="WHY", help="due, waiting, timer, event, children, worker, retrying, scheduled"
        )
        found.add_argument("--type", dest="workflow_type", help="a workflow type")
        found.add_argument("--queue", help="a queue")
        found.add_argument("--since", type=_since, help="created since: a date, a moment or an age (6h, 7d)")
        found.add_argument("--parent", help="the children of this workflow")
        found.add_argument("--worker", help="the runs this worker holds")
        found.add_argument("--tag", help="the runs started with this tag")
        found.add_argument("--search", help="an id (or its first characters), an exact type or an idempotency key")
        found.add_argument("--limit", action=Bounded, minimum=1, default=50, help="how many (default 50)")
        shown = "One workflow: its columns, error history, patches, fork origin, steps, children and events."
        show = verb("show", shown)
        show.add_argument("id")
        show.add_argument(
            "--steps",
            type=_steps,
            metavar="FROM:TO",
            help="these steps (FROM: to the end, :TO from the start, N: step N and the "
            f"{step_window.PAGE - 1} after it); by default the first {step_window.HEAD}, the last "
            f"{step_window.TAIL} and the one the run is at",
        )
        verb("workers", "The runworkers processes: what each holds, its hung step bodies and restarts.").add_argument(
            "--all", action="store_true", help="with the workers marked gone"
        )
        retry = verb("retry", "Send failed or cancelled workflows back to pending, completed steps kept.")
        retry.add_argument("ids", nargs="+", metavar="ID")
        retry.add_argument("--from-step", action=Bounded, minimum=1, help="run this step and every later one again")
        verb("restart", "Run finished workflows again from their first step.").add_argument("ids", nargs="+")
        cancel = verb("cancel", "Cancel pending, running or paused workflows.")
        cancel.add_argument("ids", nargs="+", metavar="ID")
        cancel.add_argument("--reason", default="Cancelled by an operator.", help="stored as the error message")
        event = verb("send-event", "Send an event (a JSON payload) to a workflow.")
        event.add_argument("id")
        event.add_argument("name")
        event.add_argument("--payload", default="null", help="JSON (default null)")
        for action, text in workflow_queues.PAUSE_HELP.items():
            said = f"{RUN_PAUSE_HELP[action]} Given one queue's name instead: {text[0].lower()}{text[1:-1]}"
            verb(action, f"{said} (workflow_queues {action}).").add_argument(
                "targets", nargs="+", metavar="ID|QUEUE", help="whole workflow ids, or one queue's name"
            )
        schedules = verb("schedules", "The cron schedules: list them, pause, resume or start one now.")
        schedules.add_argument("action", choices=SCHEDULE_ACTIONS, help=", ".join(SCHEDULE_ACTIONS))
        schedules.add_argument("names", nargs="*", metavar="NAME", help="the schedules (not for list)")
        said = (
            "Check the database, the migrations and, when asked, a worker; one line a check. Exit status 0 "
            "when all pass, 1 otherwise: for a supervisor's probe."
        )
        health = verbs.add_parser("health", help=said, description=said, **common)
        health.add_argument("--json", action="store_true", help="print JSON, for scripts")
        health.add_argument(
            "--timeout", **POSITIVE_SECONDS, default=HEALTH_TIME_LIMIT, help="seconds each check may take (default 5)"
        )
        whose = health.add_mutually_exclusive_group()
        whose.add_argument("--worker", metavar="ID", help="that worker heartbeats, is not gone and is not stopping")
        whose.add_argument(
            "--this-host", action="store_true", help="as --worker, for each runworkers process running on this host"
        )
        health.add_argument(
            "--skip-migrations",
            action="store_true",
            help="leave the migrations out: for a liveness probe, which a newer release's migrations must not fail",
        )

    def execute(self, *args: Any, **options: Any) -> Any:
        if options.get("verb") == "health":  # it says what is down itself, in its own line
            return BaseCommand.execute(self, *args, **options)
        return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:
        verb = options["verb"].replace("-", "_")
        handler: Callable[[dict[str, Any]], Any] = getattr(self, f"_{verb}")
        try:
            result = handler(options)
        except OperationalError as exc:
            if not isinstance(exc.__cause__, psycopg.errors.QueryCanceled):
                raise
            raise CommandError(
                f"The read took longer than {options['timeout']:g} s and was cancelled: narrow the filters, "
                "or raise --timeout."
            ) from None
        if result is not None:
            self.stdout.write(dumps_for_display(result, cls=DjangoJSONEncoder, indent=2))

    # -- reads ---------------------------------------------------------------------

    def _list(self, options: dict[str, Any]) -> Any:
        filters = listing.Filters(
            status=options["status"],
            pending=options["pending"],
            workflow_type=options["workflow_type"],
            queue=options["queue"],
            created_since=options["since"],
            parent=options["parent"],
            worker=options["worker"],
            tag=options["tag"],
            search=options["search"],
        )
        try:
            filters.q()
        except listing.InvalidFilter as exc:
            raise CommandError(str(exc), returncode=BAD_ARGUMENT) from None
        with stats.time_limit(options["timeout"]):
            found = listing.rows(filters, options["limit"])
        if options["json"]:
            return found
        table = [
            (
                *(str(row["id"]), printable(row["workflow_type"]), _status(row), printable(row["queue"])),
                _step(row),
                *(f"{row['attempts']}/{row['max_retries'] + 1}", _moment(row["created_at"])),
                _error_line(row["error_message"]),
            )
            for row in found
        ]
        heading = ("id", "type", "status", "queue", "step", "attempts", "created", "error")
        self._table(heading, table, "no workflow matches")
        return None

    def _show(self, options: dict[str, Any]) -> Any:
        workflow_id = _workflow_id(options["id"])
        with stats.time_limit(options["timeout"]):
            try:
                found = listing.details(workflow_id, options["steps"])
            except Workflow.DoesNotExist:
                raise CommandError(f"No workflow {workflow_id}.", returncode=NOT_FOUND) from None
        if options["json"]:
            return found
        for label, key in (("id", "id"), ("type", "workflow_type"), ("queue", "queue"), ("priority", "priority")):
            self.stdout.write(f"{label + ':':<12}{printable(str(found[key]))}")
        self.stdout.write(f"{'status:':<12}{_status(found)}")
        self.stdout.write(f"{'attempts:':<12}{found['attempts']} of {found['max_retries'] + 1}")
        for key in ("idempotency_key", "worker_id", "parent_id", "waiting_for", "run_after", "deadline"):
            if found[key] is not None:
                self.stdout.write(f"{key.replace('_', ' ') + ':':<12}{printable(str(found[key]))}")
        if found["tags"]:
            self.stdout.write(f"{'tags:':<12}{printable(', '.join(found['tags']))}")
        if found["progress"] is not None:
            self.stdout.write(f"{'progress:':<12}{printable(listing.progress_text(found['progress']))}")
        if found["scoped_key"] is not None:
            self.stdout.write(f"{'key:':<12}{printable(found['scoped_key'])} ({found['key_scope']})")
        if found["forked_from_id"] is not None:
            self.stdout.write(f"{'forked from:':<12}{found['forked_from_id']}")
        if found["patches"]:
            self.stdout.write(f"{'patches:':<12}{json.dumps(found['patches'])}")
        for key in ("created_at", "started_at", "finished_at", "updated_at"):
            self.stdout.write(f"{key.replace('_at', '') + ':':<12}{_moment(found[key])}")
        if children := found["children"]:
            counted = ", ".join(f"{n} {status}" for status, n in children.items())
            self.stdout.write(f"{'children:':<12}{sum(children.values())} in all: {counted}")
            # What the admin page links to, as the commands that list them: one a status (--status takes one).
            for status in children:
                self.stdout.write(f"{'':<12}manage.py workflows list --parent {found['id']} --status {status}")
        if found["unconsumed_events"]:
            events = printable(", ".join(found["unconsumed_events"]))
            self.stdout.write(f"{'events:':<12}{events} (not consumed yet)")
        self.stdout.write(f"{'input:':<12}{dumps_for_display(found['input_data'])}")
        self.stdout.write(f"{'output:':<12}{dumps_for_display(found['output_data'])}")
        if found["error_message"]:
            self.stdout.write(f"{'error:':<12}{printable(found['error_message'])}")
        for n, entry in enumerate(found["error_history"]):  # newest first
            label = "errors:" if n == 0 else ""
            said = f"{entry['at']} attempt {entry['attempt']} step {entry['step']} ({entry['status']})"
            self.stdout.write(f"{label:<12}{said}: {printable(entry['message'])}")
        gap_after = {gap["first"] - 1: gap for gap in found["steps_not_shown"]}
        steps: list[tuple[str, ...]] = []
        for s in found["steps"]:
            steps.append(
                (
                    *(str(s["step_number"]), printable(s["step_name"] or ""), s["status"], str(s["attempts"])),
                    *(_moment(s["started_at"]), _moment(s["completed_at"]), printable(s["error_message"] or "")),
                )
            )
            if s["step_number"] in gap_after:
                gap = gap_after[s["step_number"]]
                first, last = gap["first"], gap["last"]
                steps.append(("...", f"{last - first + 1:,} not shown (--steps {first}:{last})", *[""] * 5))
        self.stdout.write("")
        if gap_after:
            shown = f"{len(found['steps']):,} of {found['step_count']:,} steps shown"
            self.stdout.write(f"{shown}; --steps FROM:TO shows others")
        self._table(("step", "name", "status", "runs", "started", "completed", "error"), steps, "no step recorded")
        if found["error_traceback"]:
            # Indented: a line that the exception's own message breaks cannot pass for one of ours.
            lines = printable(found["error_traceback"], newlines=True).splitlines()
            self.stdout.write("\ntraceback:\n" + "\n".join(f"  | {line}" for line in lines))
        return None

    def _workers(self, options: dict[str, Any]) -> Any:
        with stats.time_limit(options["timeout"]):
            found = listing.workers(include_gone=options["all"])
        if options["json"]:
            return found
        table = [
            (
                *(w["id"], w["state"], ",".join(w["queues"] or ["all"]), str(w["concurrency"]), w["version"]),
                f"{w['abandoned_bodies']}/{w['restarts']}",
                *(_moment(w["started_at"]), _moment(w["last_seen_at"]), " ".join(w["holds"]) or "nothing"),
            )
            for w in found
        ]
        heading = ("worker", "state", "queues", "threads", "version", "hung/restarts", "started", "last seen", "holds")
        self._table(heading, table, "no worker process is registered")
        return None

    def _health(self, options: dict[str, Any]) -> Any:
        checks = health.run_checks(
            timeout=options["timeout"],
            migrations=not options["skip_migrations"],
            worker=options["worker"],
            this_host=options["this_host"],
        )
        healthy = all(check.ok for check in checks)
        if options["json"]:
            self.stdout.write(json.dumps({"healthy": healthy, "checks": [c.as_dict() for c in checks]}, indent=2))
        else:
            for check in checks:
                self.stdout.write(f"{'ok' if check.ok else 'FAIL':<4}  {check.name}: {printable(check.detail)}")
        if not healthy:
            failed = [check.name for check in checks if not check.ok]
            raise CommandError(f"unhealthy: {', '.join(failed)}", returncode=1)
        return None

    # -- repairs -------------------------------------------------------------------

    def _retry(self, options: dict[str, Any]) -> Any:
        step = options["from_step"]
        if step is None:
            return self._each(options, api.retry_workflow, "retried")
        return self._each(options, lambda pk: api.retry_from_step(pk, step), f"retried from step {step}")

    def _restart(self, options: dict[str, Any]) -> Any:
        return self._each(options, api.restart_workflow, "restarted")

    def _cancel(self, options: dict[str, Any]) -> Any:
        return self._each(options, lambda pk: api.cancel_workflow(pk, options["reason"]), "cancelled")

    def _send_event(self, options: dict[str, Any]) -> Any:
        try:
            payload = json.loads(options["payload"])
        except json.JSONDecodeError as exc:
            raise CommandError(f"--payload is not JSON: {exc}", returncode=BAD_ARGUMENT) from None
        workflow_id = _workflow_id(options["id"])
        try:
            event = api.send_event(workflow_id, options["name"], payload)
        except InvalidWorkflowInput as exc:
            raise CommandError(str(exc), returncode=BAD_ARGUMENT) from None
        except Workflow.DoesNotExist:
            raise CommandError(f"No workflow {workflow_id}.", returncode=NOT_FOUND) from None
        except InvalidTransition as exc:
            raise CommandError(str(exc), returncode=REFUSED) from None
        if options["json"]:
            return {"id": workflow_id, "event": event.name, "event_id": event.pk, "awaited": event.awaited,
                    "waiting_for": event.waiting_for}  # fmt: skip
        said = f"{workflow_id}: event {event.name!r} sent"
        if not event.awaited:
            said += f"; the run is not waiting for it, and keeps it until it waits for {event.name!r}"
            said += f" (it waits for {event.waiting_for!r} now)" if event.waiting_for else ""
        self.stdout.write(said)
        return None

    def _schedules(self, options: dict[str, Any]) -> Any:
        action, names = options["action"], options["names"]
        if action == "list":
            if names:
                raise CommandError("schedules list takes no names.", returncode=BAD_ARGUMENT)
            return self._schedule_list(options)
        if not names:
            raise CommandError(f"schedules {action} needs the names of schedules.", returncode=BAD_ARGUMENT)
        change = {"pause": schedule_api.pause_schedule, "resume": schedule_api.resume_schedule}.get(action)
        results, worst = [], 0
        for name in names:
            try:
                if change is not None:
                    row = change(name)
                    results.append({"name": name, "ok": True, "enabled": row.enabled})
                else:
                    run = schedule_api.run_now(name)
                    results.append({"name": name, "ok": True, "workflow_id": str(run.pk)})
            except UnknownSchedule as exc:
                results.append({"name": name, "ok": False, "error": str(exc)})
                worst = max(worst, NOT_FOUND)
            except (InvalidSchedule, InvalidWorkflowInput, UnknownWorkflowType) as exc:
                results.append({"name": name, "ok": False, "error": str(exc)})
                worst = max(worst, REFUSED)
        done = {"pause": "paused", "resume": "resumed", "run-now": "started a run"}[action]
        if options["json"]:
            self.stdout.write(json.dumps(results, indent=2))
        else:
            for result in results:
                if not result["ok"]:
                    self.stderr.write(result["error"])
                else:
                    started = f" {result['workflow_id']}" if "workflow_id" in result else ""
                    self.stdout.write(f"{printable(result['name'])}: {done}{started}")
        if worst:
            failed = sum(1 for result in results if not result["ok"])
            error = CommandError(f"{failed} of {len(results)} schedule(s) not {done}.", returncode=worst)
            raise already_reported(error) if options["json"] else error
        return None

    def _schedule_list(self, options: dict[str, Any]) -> Any:
        with stats.time_limit(options["timeout"]):
            found = schedule_rows(timezone.now())
        if options["json"]:
            return found
        table = [
            (
                *(printable(row["name"]), printable(row["workflow_type"]), printable(row["cron"])),
                printable(row["timezone"]),
                "enabled" if row["enabled"] else "paused",
                "code" if row["from_code"] else "operator",
                _moment(row["next_tick"]) if isinstance(row["next_tick"], datetime.datetime) else "-",
                f"{str(row['last_run'])[-8:]} {_moment(row['last_started_at'])}" if row["last_run"] else "-",
            )
            for row in found
        ]
        heading = ("name", "type", "cron", "time zone", "state", "from", "next tick", "last run")
        self._table(heading, table, "no schedule")
        return None

    def _pause(self, options: dict[str, Any]) -> Any:
        return self._pause_or_resume(options, "pause", api.pause_workflow, "paused")

    def _resume(self, options: dict[str, Any]) -> Any:
        return self._pause_or_resume(options, "resume", api.resume_workflow, "resumed")

    def _pause_or_resume(
        self, options: dict[str, Any], action: str, move: Callable[[uuid.UUID], Workflow], done: str
    ) -> Any:
        """Runs, given by whole ids (a prefix could be a queue's name); else one queue."""
        targets = options["targets"]
        if all(_is_uuid(target) for target in targets):
            return self._each({**options, "ids": targets}, move, done)
        if len(targets) > 1:
            raise CommandError(
                f"{action} takes whole workflow ids or one queue's name, not {' '.join(targets)!r}",
                returncode=BAD_ARGUMENT,
            )
        return workflow_queues.pause_or_resume(self, action, targets[0], options["json"])

    def _each(self, options: dict[str, Any], repair: Callable[[uuid.UUID], Workflow], done: str) -> Any:
        """Repair each id through the API; report each; exit with the worst failure's status."""
        results, worst = [], 0
        for text in options["ids"]:
            try:
                workflow = repair(_workflow_id(text))
            except CommandError as exc:  # an id that names no workflow, or several
                results.append({"id": text, "ok": False, "error": str(exc)})
                worst = max(worst, exc.returncode)
            except Workflow.DoesNotExist:
                results.append({"id": text, "ok": False, "error": f"No workflow {text}."})
                worst = max(worst, NOT_FOUND)
            except (InvalidTransition, InvalidWorkflowInput) as exc:
                results.append({"id": text, "ok": False, "error": str(exc)})
                worst = max(worst, REFUSED)
            else:
                results.append({"id": str(workflow.pk), "ok": True, "status": workflow.status})
        if options["json"]:
            self.stdout.write(json.dumps(results, indent=2))
        else:
            for result in results:
                # "retried, now pending"; a cancel's "cancelled" is said once.
                now = f", now {result['status']}" if result["ok"] and result["status"] != done else ""
                line = f"{result['id']}: {done}{now}" if result["ok"] else result["error"]
                (self.stdout if result["ok"] else self.stderr).write(line)
        if worst:
            failed = sum(1 for result in results if not result["ok"])
            error = CommandError(f"{failed} of {len(results)} workflow(s) not {done}.", returncode=worst)
            raise already_reported(error) if options["json"] else error
        return None

    def _table(self, heading: tuple[str, ...], rows: Sequence[tuple[str, ...]], empty: str) -> None:
        widths = [max([len(heading[i])] + [len(row[i]) for row in rows]) for i in range(len(heading))]
        self.stdout.write("  ".join(title.ljust(widths[i]) for i, title in enumerate(heading)).rstrip())
        for row in rows:
            self.stdout.write("  ".join(value.ljust(widths[i]) for i, value in enumerate(row)).rstrip())
        if not rows:
            self.stdout.write(f"({empty})")


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _workflow_id(text: str) -> uuid.UUID:
    """A whole id, or the first or last characters of one, as the admin and this command show them."""
    try:
        return listing.resolve_id(text)
    except listing.InvalidFilter as exc:
        raise CommandError(str(exc), returncode=BAD_ARGUMENT) from None
    except listing.NoSuchWorkflow as exc:
        raise CommandError(str(exc), returncode=NOT_FOUND) from None


#: Characters of an error the list shows; ``show`` prints it whole.
ERROR_SHOWN = 60


def _step(row: dict[str, Any]) -> str:
    """The step a run is at, failed at or stopped at (``current_step`` counts the
    steps completed before it); a completed run's steps, all done."""
    if row["status"] == "completed":
        return f"{row['current_step']} done"
    return str(row["current_step"] + 1)


def _error_line(message: str | None) -> str:
    if not message:
        return "-"
    line = printable(" ".join(message.split()))  # one line: its breaks become spaces
    return line if len(line) <= ERROR_SHOWN else line[: ERROR_SHOWN - 1] + "…"


def _status(row: dict[str, Any]) -> str:
    if row["status"] != "pending" or row["pending_reason"] in (None, "due"):
        return str(row["status"])
    wait = Wait.parse(row["waiting_for"]) if row["pending_reason"] == "waiting" else None
    if wait is not None:
        return f"pending (waiting for {wait.kind.label})"
    return f"pending ({row['pending_reason']})"


def _moment(value: datetime.datetime | None) -> str:
    return moments.local(value).strftime("%Y-%m-%d %H:%M:%S") if value else "-"
