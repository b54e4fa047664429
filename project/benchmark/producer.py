"""The producer of ``benchmark --steady``: one-step workflows started one
``start_workflow`` at a time at a fixed rate. ``--steady-producers K`` runs K
of them, each in a process of its own (``python -m
project.benchmark.producer``) at a K-th of the rate: one producer's starts
each wait for their commit, which caps what one can offer."""

from __future__ import annotations

import sys
import time

from .worker_process import set_up
from .workflows import WORKFLOW_TYPE


def produce(rate: float, seconds: float) -> tuple[int, float]:
    """Start runs at ``rate`` a second for ``seconds``; how many, in how long."""
    from orchestration import start_workflow  # once Django is set up

    started = 0
    begun = time.monotonic()
    while (now := time.monotonic()) - begun < seconds:
        due = begun + started / rate
        if due > now:
            time.sleep(due - now)
        start_workflow(WORKFLOW_TYPE, {"steps": 1})
        started += 1
    return started, time.monotonic() - begun


def main(argv: list[str]) -> None:
    """``alias database rate seconds start_at``: produce into ``database`` from
    the wall-clock moment ``start_at`` (so that the producers start together,
    their imports done), then print how many it started and in how long."""
    alias, database, rate, seconds, start_at = argv
    set_up(alias, database)
    from django.db import connections

    connections[alias].ensure_connection()
    time.sleep(max(0.0, float(start_at) - time.time()))
    started, elapsed = produce(float(rate), float(seconds))
    print(started, elapsed, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
