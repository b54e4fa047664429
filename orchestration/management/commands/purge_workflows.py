from __future__ import annotations

import datetime
from typing import Any

from django.core.management.base import CommandParser

from orchestration import clock, retention
from orchestration.management.arguments import Bounded, refused
from orchestration.management.outage import ReportsOutages
from orchestration.models import FINISHED_STATUSES


class Command(ReportsOutages):
    help = (
        "Delete finished workflows (completed, failed, cancelled) and their steps once they finished "
        "more than --older-than days ago. Pending and running workflows are never touched, nor a finished "
        "child whose parent has not finished."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            action=Bounded,
            kind=float,
            unit="days",
            required=True,
            metavar="DAYS",
            help="age in days (e.g. 30)",
        )
        parser.add_argument(
            "--status",
            action="append",
            metavar="STATUS",
            help=f"only these statuses, repeatable or comma-separated (default: {','.join(FINISHED_STATUSES)})",
        )
        parser.add_argument(
            "--batch-size", action=Bounded, minimum=1, default=1000, help="workflows deleted per transaction"
        )
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        statuses = [s.strip() for value in options["status"] or [] for s in value.split(",") if s.strip()]
        try:
            cutoff = clock.now() - datetime.timedelta(days=options["older_than"])
        except OverflowError:
            raise refused(f"--older-than {options['older_than']:g} days reaches back before the year 1") from None
        try:
            result = retention.purge_workflows(
                cutoff,
                statuses or None,
                batch_size=options["batch_size"],
                dry_run=options["dry_run"],
                on_batch=self._progress,
            )
        except ValueError as exc:  # a status it does not purge
            raise refused(str(exc)) from None
        which = ", ".join(statuses) if statuses else "finished"
        if options["dry_run"]:
            self.stdout.write(
                f"Dry run: {result.expected} {which} workflow(s) finished before {cutoff:%Y-%m-%d %H:%M:%S %Z} "
                "would be deleted, with their steps."
            )
            return
        self.stdout.write(
            f"Deleted {result.workflows} {which} workflow(s) finished before {cutoff:%Y-%m-%d %H:%M:%S %Z} "
            f"and their {result.steps} step(s), in {result.batches} batch(es)."
        )

    def _progress(self, progress: retention.PurgeProgress) -> None:
        self.stdout.write(
            f"batch {progress.batches}: {progress.workflows} of ~{progress.expected} workflows deleted "
            f"({progress.steps} steps)"
        )
