from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser
from django.core.serializers.json import DjangoJSONEncoder

from orchestration.management.arguments import Bounded
from orchestration.management.outage import ReportsOutages
from orchestration.reports import stats


class Command(ReportsOutages):
    help = "Print the three monitoring reports: success rate per type, stuck workflows, average step durations."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--hours", action=Bounded, minimum=1, default=24, help="window of the success-rate report (default 24)"
        )
        parser.add_argument("--json", action="store_true", help="print JSON instead of tables")

    def handle(self, *args: Any, **options: Any) -> None:
        reports = stats.all_reports(options["hours"])
        if options["json"]:
            payload = {report.title: report.as_dicts() for report in reports}
            self.stdout.write(json.dumps(payload, cls=DjangoJSONEncoder, indent=2))
            return
        for report in reports:
            self.stdout.write(render_table(report.title, report.columns, report.rows))


def render_table(title: str, columns: list[str], rows: list[tuple[Any, ...]]) -> str:
    cells = [[str(value) for value in row] for row in rows]
    widths = [max([len(column)] + [len(row[i]) for row in cells]) for i, column in enumerate(columns)]
    lines = [title, "  ".join(column.ljust(widths[i]) for i, column in enumerate(columns))]
    lines.append("  ".join("-" * width for width in widths))
    lines += ["  ".join(value.ljust(widths[i]) for i, value in enumerate(row)) for row in cells]
    if not cells:
        lines.append("(none)")
    return "\n".join(lines) + "\n"
