"""``manage.py benchmark``: a shell over ``project.benchmark.runner``,
which registers the benchmark's workflow type when it runs (in this process and
its workers only, never in the project at large)."""

from __future__ import annotations

import math
from argparse import ArgumentTypeError
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from orchestration.management.arguments import Bounded
from project.benchmark import standalone
from project.benchmark.report import render
from project.benchmark.runner import MEASUREMENTS, Benchmark, Options


class Command(BaseCommand):
    help = (
        "Measure enqueue rates, workflows/s with real runworkers processes, enqueue-to-start latency and worker "
        "memory, each beside the limit a bare psycopg loop reaches on the same PostgreSQL. Runs in scratch "
        "databases it creates and drops."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        defaults = Options()
        parser.add_argument(
            "--workflows", action=Bounded, minimum=1, default=defaults.workflows, help="workflows a measurement"
        )
        parser.add_argument(
            "--steps", action=Bounded, minimum=1, default=defaults.steps, help="steps of the multi-step run"
        )
        parser.add_argument(
            "--processes", action=Bounded, minimum=1, default=defaults.processes, help="runworkers processes"
        )
        parser.add_argument(
            "--threads", action=Bounded, minimum=1, default=defaults.threads, help="--concurrency of each"
        )
        parser.add_argument(
            "--finished-rows",
            action=Bounded,
            minimum=1,
            default=defaults.finished_rows,
            help="finished workflows pre-loaded",
        )
        parser.add_argument(
            "--backlog", action=Bounded, minimum=1, default=defaults.backlog, help="workflows of the backlog run"
        )
        parser.add_argument("--latency-samples", action=Bounded, minimum=1, default=defaults.latency_samples)
        parser.add_argument("--single-enqueues", action=Bounded, minimum=1, default=defaults.single_enqueues)
        parser.add_argument(
            "--repeat", action=Bounded, minimum=1, default=defaults.repeat, help="rounds; medians are reported"
        )
        parser.add_argument("--rss-concurrency", action=Bounded, minimum=1, default=defaults.rss_concurrency)
        parser.add_argument(
            "--worker-args", default="", help='extra runworkers options, e.g. "--no-listen --poll-interval 0.1"'
        )
        parser.add_argument(
            "--vacuum-every",
            action=Bounded,
            kind=float,
            unit="seconds",
            default=0,
            help="VACUUM the scratch tables every S seconds (autovacuum off)",
        )
        for option, what in (
            ("not_due", "also drain one-step runs behind N waiting runs (timers, events, delayed starts, backoffs)"),
            ("wake", "also drain N timers ending at once, then N new runs started at once"),
            ("fan_out", "also run one parent of N one-step children beside N independent one-step runs"),
        ):
            parser.add_argument(f"--{option.replace('_', '-')}", action=Bounded, minimum=0, default=0, help=what)
        parser.add_argument("--no-flow-control", action="store_true", help="skip the runs under flow control's limits")
        parser.add_argument(
            "--progress", action="store_true", help="every step of the benchmark's runs reports progress once"
        )
        parser.add_argument(
            "--only",
            default="",
            help=f"comma-separated measurements to run, of {', '.join(MEASUREMENTS)} (ratios need their base)",
        )
        parser.add_argument(
            "--idle-workers",
            type=_numbers(int),
            default=[],
            help="instead of the drains: N idle runworkers processes for each N, e.g. 1,10,30 (connections, "
            "transactions/s, CPU)",
        )
        parser.add_argument("--idle-threads", action=Bounded, minimum=1, default=4, help="--concurrency of each")
        parser.add_argument("--idle-seconds", action=Bounded, kind=float, unit="seconds", minimum=1, default=60.0)
        parser.add_argument(
            "--steady",
            type=_numbers(float),
            default=[],
            help="instead of the drains: a producer starting one workflow at a time at each RATE[,RATE..] a second, "
            "beside --processes runworkers",
        )
        parser.add_argument("--steady-seconds", action=Bounded, kind=float, unit="seconds", minimum=1, default=60.0)
        parser.add_argument(
            "--steady-producers",
            action=Bounded,
            minimum=1,
            default=1,
            help="producers of --steady, each a process of its own at a share of the rate (one producer's starts "
            "each wait for their commit, which caps its rate)",
        )
        parser.add_argument("--keep", action="store_true", help="keep the scratch databases for inspection")
        parser.add_argument("--json", action="store_true", help="print only the JSON lines")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["idle_workers"] or options["steady"]:
            self._standalone(options)
            return
        settings = Options(
            workflows=options["workflows"],
            steps=options["steps"],
            processes=options["processes"],
            threads=options["threads"],
            finished_rows=options["finished_rows"],
            backlog=options["backlog"],
            latency_samples=options["latency_samples"],
            single_enqueues=options["single_enqueues"],
            repeat=options["repeat"],
            rss_concurrency=options["rss_concurrency"],
            worker_args=options["worker_args"].split(),
            keep=options["keep"],
            vacuum_every=options["vacuum_every"],
            flow_control=not options["no_flow_control"],
            not_due=options["not_due"],
            wake=options["wake"],
            fan_out=options["fan_out"],
            progress=options["progress"],
            only=[name for name in options["only"].split(",") if name],
        )
        unknown = set(settings.only) - set(MEASUREMENTS)
        if unknown:
            raise CommandError(
                f"--only: no measurement {', '.join(sorted(unknown))}; choose from {', '.join(MEASUREMENTS)}"
            )
        quiet = options["json"]
        benchmark = Benchmark(settings, say=(lambda line: None) if quiet else self.stderr.write)
        try:
            figures = benchmark.run()
        except RuntimeError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(render(figures, benchmark.plan, settings, benchmark.server, json_only=quiet))

    def _standalone(self, options: dict[str, Any]) -> None:
        settings = standalone.StandaloneOptions(
            idle_workers=options["idle_workers"],
            idle_threads=options["idle_threads"],
            idle_seconds=options["idle_seconds"],
            steady=options["steady"],
            steady_seconds=options["steady_seconds"],
            steady_producers=options["steady_producers"],
            processes=options["processes"],
            threads=options["threads"],
            worker_args=options["worker_args"].split(),
            keep=options["keep"],
        )
        quiet = options["json"]
        try:
            figures, server = standalone.run(settings, say=(lambda line: None) if quiet else self.stderr.write)
        except RuntimeError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(standalone.render(figures, server, json_only=quiet))


def _numbers(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    """A comma-separated list of positive numbers, as ``argparse``'s ``type``."""

    def parse(text: str) -> list[Any]:
        try:
            values = [kind(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
        if not values or not all(0 < value < math.inf for value in values):
            raise ArgumentTypeError(f"expected comma-separated numbers above 0, got {text!r}")
        return values

    return parse
