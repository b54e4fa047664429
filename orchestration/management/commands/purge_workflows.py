from __future__ import annotations

import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from orchestration import retention
from orchestration.models import FINISHED_STATUSES


def _non_negative_float(value: str) -> float:
    number = float(value)
    if not number >= 0:
        raise ValueError(value)
    return number


class Command(BaseCommand):
    help = (
        "Delete finished workflows (completed, failed, cancelled) and their steps once they finished "
        "more than --older-than days ago. Pending and running workflows are never touched, nor a finished "
        "child whose parent has not finished."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than", type=_non_negative_float, required=True, metavar="DAYS", help="age in days (e.g. 30)"
        )
        parser.add_argument(
            "--status",
            action="append",
            metavar="STATUS",
            help=f"only these statuses, repeatable or comma-separated (default: {','.join(FINISHED_STATUSES)})",
        )
        parser.add_argument("--batch-size", type=int, default=1000, help="workflows deleted per transaction")
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        statuses = [s.strip() for value in options["status"] or [] for s in value.split(",") if s.strip()]
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be 1 or more")
        cutoff = timezone.now() - datetime.timedelta(days=options["older_than"])
        try:
            result = retention.purge_workflows(
                cutoff,
                statuses or None,
                batch_size=options["batch_size"],
                dry_run=options["dry_run"],
                on_batch=self._progress,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
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
