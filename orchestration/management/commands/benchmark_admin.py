"""``manage.py benchmark_admin``: a shell over ``orchestration.benchmark.admin_pages``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from orchestration.benchmark.admin_pages import AdminBenchmark, Options, render
from orchestration.management.arguments import Bounded


class Command(BaseCommand):
    help = (
        "Time every admin page (the list with each filter, sort and search, a workflow's page, the workers page, "
        "the overview), each report and the metrics on a month of work (10 million workflows by default), loaded "
        "into a scratch database it creates and drops."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        defaults = Options()
        parser.add_argument("--rows", action=Bounded, minimum=1, default=defaults.rows, help="workflows loaded")
        parser.add_argument(
            "--days", action=Bounded, minimum=1, default=defaults.days, help="the days they spread over"
        )
        parser.add_argument(
            "--steps", action=Bounded, minimum=1, default=defaults.steps, help="steps of a finished workflow"
        )
        parser.add_argument("--repeat", action=Bounded, minimum=1, default=defaults.repeat, help="fetches of each page")
        parser.add_argument(
            "--chunk", action=Bounded, minimum=1, default=defaults.chunk, help="workflows loaded a statement"
        )
        parser.add_argument("--keep", action="store_true", help="keep the scratch database for inspection")

    def handle(self, *args: Any, **options: Any) -> None:
        settings = Options(
            rows=options["rows"],
            days=options["days"],
            steps=options["steps"],
            repeat=options["repeat"],
            chunk=options["chunk"],
            keep=options["keep"],
        )
        benchmark = AdminBenchmark(settings, say=self.stderr.write)
        timings = benchmark.run()
        self.stdout.write(render(timings, settings, benchmark.facts))
