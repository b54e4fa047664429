"""The measurements ``manage.py benchmark`` runs on their own, instead of the
drains, when asked for: idle workers (``--idle-workers``) and steady arrivals
(``--steady``). Each runs in a scratch database of its own."""

from __future__ import annotations

import json
import platform
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .figures import Figure
from .idle import measure_idle
from .internals import queue_database
from .scratch import ScratchDatabase
from .steady import measure_steady
from .workflows import register


@dataclass
class StandaloneOptions:
    #: Numbers of idle processes to measure, one after the other (empty: none).
    idle_workers: list[int] = field(default_factory=list)
    idle_threads: int = 4
    idle_seconds: float = 60.0
    #: Arrival rates (workflows/s) to measure, one after the other (empty: none).
    steady: list[float] = field(default_factory=list)
    steady_seconds: float = 60.0
    #: Producers of the steady arrivals (more than one: each a process of its own).
    steady_producers: int = 1
    processes: int = 2
    threads: int = 4
    worker_args: list[str] = field(default_factory=list)
    keep: bool = False


def run(options: StandaloneOptions, say: Callable[[str], None]) -> tuple[list[Figure], dict[str, str]]:
    register()
    log_dir = Path(tempfile.mkdtemp(prefix="orchestration-benchmark-"))
    database = ScratchDatabase(f"orchestration_benchmark_{secrets.token_hex(3)}_alone", queue_database())
    figures: list[Figure] = []
    with database.created(keep=options.keep):
        say(f"scratch database {database.name}; worker logs in {log_dir}")
        server = database.server_facts()
        if options.idle_workers:
            figures += measure_idle(
                database,
                options.idle_workers,
                options.idle_threads,
                options.worker_args,
                log_dir,
                options.idle_seconds,
                say,
            )
        if options.steady:
            figures += measure_steady(
                database,
                options.steady,
                options.steady_seconds,
                options.processes,
                options.threads,
                options.worker_args,
                log_dir,
                say,
                options.steady_producers,
            )
    return figures, server


def render(figures: list[Figure], server: dict[str, str], json_only: bool = False) -> str:
    lines = [json.dumps({"configuration": {**server, "python": platform.python_version()}})]
    lines += [figure.as_json() for figure in figures]
    if json_only or not figures:
        return "\n".join(lines) + "\n"
    width = max(len(figure.metric) for figure in figures)
    table = [
        f"PostgreSQL {server.get('server_version')} (autovacuum {server.get('autovacuum')}), "
        f"{server.get('cpus')} CPUs, Python {platform.python_version()}",
        "",
        *(f"{figure.metric:<{width}}  {figure.value:>10.2f}  {figure.unit}" for figure in figures),
    ]
    return "\n".join([*table, "", *lines]) + "\n"
