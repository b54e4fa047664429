"""``manage.py benchmark_upgrade``: a shell over ``project.benchmark.upgrade``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from orchestration.management.arguments import Bounded
from project.benchmark.upgrade import PREVIOUS_RELEASE, Options, UpgradeBenchmark, render


class Command(BaseCommand):
    help = (
        f"Time each migration since {PREVIOUS_RELEASE[0]} on a table of finished runs, under a stream of starts "
        "and claims made with that release's statements, and report per migration the longest stall of a start, "
        "a claim and a checkpoint. Runs in a scratch database it creates and drops."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        defaults = Options()
        parser.add_argument(
            "--rows", action=Bounded, minimum=0, default=defaults.rows, help="finished runs pre-loaded (10,000,000)"
        )
        parser.add_argument(
            "--start-rate", action=Bounded, kind=float, minimum=0, above=True, default=defaults.start_rate,
            help="starts a second beside migrate",
        )  # fmt: skip
        parser.add_argument(
            "--claim-rate", action=Bounded, kind=float, minimum=0, above=True, default=defaults.claim_rate,
            help="claims a second beside migrate (each then checkpoints a step and ends its run)",
        )  # fmt: skip
        parser.add_argument(
            "--settle", action=Bounded, kind=float, unit="seconds", default=defaults.settle,
            help="the load alone before migrate and after it",
        )  # fmt: skip
        parser.add_argument("--keep", action="store_true", help="keep the scratch database for inspection")
        parser.add_argument("--json", action="store_true", help="print only the JSON lines")

    def handle(self, *args: Any, **options: Any) -> None:
        settings = Options(
            rows=options["rows"],
            start_rate=options["start_rate"],
            claim_rate=options["claim_rate"],
            settle=options["settle"],
            keep=options["keep"],
        )
        quiet = options["json"]
        benchmark = UpgradeBenchmark(settings, say=(lambda line: None) if quiet else self.stderr.write)
        steps = benchmark.run()
        self.stdout.write(render(steps, settings, benchmark.server, json_only=quiet))
