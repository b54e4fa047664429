"""``manage.py benchmark_admin``: a shell over ``project.benchmark.admin_pages``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from orchestration.management.arguments import Bounded
from project.benchmark.admin_pages import AdminBenchmark, Options, render


class Command(BaseCommand):
    help = (
        "Time every admin page (the list with each filter, sort and search, a workflow's page, a run of 20,000 "
        "steps, a parent of 10,000 children, the workers page, the overview), each report and the metrics on a "
        "month of work (10 million workflows by default), loaded into a scratch database it creates and drops."
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
        parser.add_argument(
            "--long-run", action=Bounded, minimum=1, default=defaults.long_run, help="steps of the one long run"
        )
        parser.add_argument(
            "--children", action=Bounded, minimum=1, default=defaults.children, help="children of the one large parent"
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
            long_run=options["long_run"],
            children=options["children"],
        )
        benchmark = AdminBenchmark(settings, say=self.stderr.write)
        timings = benchmark.run()
        self.stdout.write(render(timings, settings, benchmark.facts))
