"""The benchmark's output: a table for people, JSON lines for machines."""

from __future__ import annotations

import json
import platform
from dataclasses import asdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .figures import Figure
    from .runner import Options


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def render(
    figures: list[Figure], plan: list[str], options: Options, server: dict[str, str], json_only: bool = False
) -> str:
    configuration = {**asdict(options), **server, "python": platform.python_version()}
    lines = [json.dumps({"configuration": configuration}), *(figure.as_json() for figure in figures)]
    if json_only:
        return "\n".join(lines) + "\n"
    width = max(len(figure.metric) for figure in figures)
    table = [
        f"orchestration benchmark: {options.processes} runworkers processes x {options.threads} threads, "
        f"{options.workflows} workflows a measurement, median of {options.repeat} rounds",
        f"PostgreSQL {server.get('server_version')} (autovacuum {server.get('autovacuum')}, synchronous_commit "
        f"{server.get('synchronous_commit')}), {server.get('cpus')} CPUs, Python {platform.python_version()}"
        + (f"; the benchmark ran VACUUM every {options.vacuum_every:g}s" if options.vacuum_every else ""),
        "",
        f"{'measurement':<{width}}  {'value':>12}  {'unit':<12}  {'ratio':>6}  {'target':<9}  met",
    ]
    for figure in figures:
        ratio = f"{figure.ratio:.0%}" if figure.ratio is not None else ""
        target = f"{figure.target[0]} {figure.target[1]:g}" if figure.target else ""
        if figure.target and figure.ratio_of:
            target = f"{figure.target[0]} {figure.target[1]:.0%}"
        met = {True: "yes", False: "NO", None: ""}[figure.met]
        table.append(
            f"{figure.metric:<{width}}  {_number(figure.value):>12}  {figure.unit:<12}  {ratio:>6}  {target:<9}  {met}"
        )
    table.append("")
    table.append("ratios: workflows/s over the limit loop of the same run (one-step over 1 transaction a job,")
    table.append("multi-step over 3 transactions a job); backlog and pre-loaded runs over one-step; flow control's")
    table.append("limits over its workers' drain with no limit. Each ratio is the median of the rounds' ratios,")
    table.append("its two drains run next to each other in every round. Single starts over the bare INSERT loop")
    table.append("on the same connection, in alternate blocks; each p99 over its p50.")
    if plan:
        table += ["", "claim plan on the pre-loaded table (EXPLAIN ANALYZE, BUFFERS):", *(f"  {line}" for line in plan)]
    return "\n".join([*table, "", *lines]) + "\n"
