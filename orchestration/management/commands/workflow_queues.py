from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from orchestration import flow
from orchestration.errors import InvalidQueueLimit, UnknownQueue
from orchestration.management.arguments import Bounded, refused
from orchestration.management.commands.workflow_stats import render_table
from orchestration.management.json_errors import JsonErrors
from orchestration.management.outage import ReportsOutages
from orchestration.models import WorkflowQueue
from orchestration.validation import parse_rate

#: The limits' options, and how a value is read ("none" lifts a limit).
LIMIT_OPTIONS = {"concurrency": int, "key_concurrency": int, "rate_limit": str, "key_rate_limit": str}
PAUSE_HELP = {
    "pause": "Pause a queue: its pending work is not claimed; running work finishes.",
    "resume": "Resume a paused queue: its pending work is claimed again.",
}
LIMIT_HELP = {
    "concurrency": "runs of the queue running at once, across every worker (1 or more; none: no limit)",
    "key_concurrency": "runs of one concurrency key running at once (1 or more; none: no limit)",
    "rate_limit": "claims in any window of a period: 100/m, 10/s, 1000/h (none: no limit)",
    "key_rate_limit": "the same, for each concurrency key (none: no limit)",
}


class Command(JsonErrors, ReportsOutages):
    help = (
        "The queues' flow control: list them (limits, running, throttled), pause or resume one, "
        "or change its limits. Every worker applies a change within a poll interval."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        listing = actions.add_parser(
            "list",
            help="every queue a registered workflow, the settings, a row or any run names: its limits, "
            "its pending and running runs",
        )
        listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
        for action, text in PAUSE_HELP.items():
            paused = actions.add_parser(action, help=text, description=text)
            paused.add_argument("queue")
            paused.add_argument("--json", action="store_true", help="print JSON, for scripts")
        said = 'Change a queue\'s limits: "none" lifts one, an option not given stays as it is.'
        limits = actions.add_parser("limits", help=said, description=said)
        limits.add_argument("queue")
        limits.add_argument("--json", action="store_true", help="print JSON, for scripts")
        for name, text in LIMIT_HELP.items():
            limits.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, metavar="VALUE", help=text)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["action"] == "list":
                return self._list(options["json"])
            if options["action"] == "limits":
                changes = {name: _limit(name, options[name]) for name in LIMIT_OPTIONS if options[name] is not None}
                if not changes:
                    raise refused(
                        f"Give at least one of {', '.join('--' + n.replace('_', '-') for n in LIMIT_OPTIONS)}."
                    )
                row = flow.set_queue_limits(options["queue"], **changes)
            else:
                return pause_or_resume(self, options["action"], options["queue"], options["json"])
        except (UnknownQueue, InvalidQueueLimit) as exc:
            raise refused(str(exc)) from None
        said(self, row, options["json"])
        return None

    def _list(self, as_json: bool) -> None:
        states = flow.queue_states()
        if as_json:
            rows = [{**dataclasses.asdict(state), "throttled": state.throttled} for state in states]
            self.stdout.write(json.dumps(rows, indent=2))
            return
        columns = ["queue", "state", "pending", "due", "running", "concurrency", "key_concurrency", "rate_limit",
                   "key_rate_limit", "throttled"]  # fmt: skip
        cells = [
            (
                s.name,
                "paused" if s.paused else "active",
                s.pending,
                s.due,
                s.running,
                s.concurrency,
                s.key_concurrency,
                f"{s.started} / {s.rate_limit}" if s.rate_limit else None,
                s.key_rate_limit,
                "; ".join(s.throttled) or "no",
            )
            for s in states
        ]
        self.stdout.write(render_table("Queues", columns, [tuple("-" if v is None else v for v in c) for c in cells]))


def pause_or_resume(command: BaseCommand, action: str, queue: str, as_json: bool) -> None:
    """``pause`` or ``resume`` queue ``queue`` and say so: this command's verbs,
    and ``workflows pause|resume``, which are aliases of them."""
    try:
        row = (flow.pause_queue if action == "pause" else flow.resume_queue)(queue)
    except UnknownQueue as exc:
        raise refused(str(exc)) from None
    said(command, row, as_json)


def said(command: BaseCommand, row: WorkflowQueue, as_json: bool) -> None:
    """A queue's state after a change, as a line or a JSON object."""
    if as_json:
        fields = {"queue": row.name, "paused": row.paused, **{name: getattr(row, name) for name in LIMIT_OPTIONS}}
        command.stdout.write(json.dumps(fields))
        return
    limits = ", ".join(f"{name} {getattr(row, name) or 'none'}" for name in LIMIT_OPTIONS)
    command.stdout.write(f"queue {row.name}: {'paused' if row.paused else 'active'}; {limits}")


def _limit(name: str, value: str) -> Any:
    """A limit's option as ``set_queue_limits`` takes it ("none" lifts it), or
    a refusal (``arguments.refused``) stating the option's rule."""
    option = f"--{name.replace('_', '-')}"
    if value.strip().lower() == "none":
        return None
    if LIMIT_OPTIONS[name] is int:
        try:
            return int(Bounded(option_strings=[option], dest=name, minimum=1).parse(value, option))
        except argparse.ArgumentError as exc:
            raise refused(f"{exc.message}; none lifts the limit") from None
    try:
        parse_rate(value)
    except InvalidQueueLimit:
        raise refused(
            f"{option} must be a rate written N/s, N/m or N/h (N from 1 to 999999999), got {value}; "
            "none lifts the limit"
        ) from None
    return value
