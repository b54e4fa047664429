"""A steady stream of starts, as a web server's requests make them, written only
against the API of the previous release, so that either release can run it.

    python tests/acceptance/upgrade_producer.py RATE

Starts RATE runs a second of a mix of the test app's workflows (a three-step
run, a durable timer, a run that fails twice before it succeeds, one that waits
for an event) and sends each waiting run its event a second after its start.
Each start is one JSON line on stdout: when it began, how long it took, the run's
id or the error that refused it. A start that falls behind is made at once, not
skipped, so that a stall shows in the next starts' times too. SIGTERM: stop
starting, send the events still owed, exit 0.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import deque
from typing import Any

MIX: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    *[("three_steps", {"sleep": 0.02}, {})] * 5,
    ("sleeper", {"seconds": 3}, {}),
    ("flaky", {"succeed_on": 3}, {}),
    # Its decorator allows no retry, and a killed worker's run is reclaimed at the cost of an attempt.
    ("awaits_approval", {}, {"max_retries": 3}),
]
EVENT_AFTER = 1.0


def main() -> int:
    rate = float(sys.argv[1])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django.db import connections

    from orchestration import send_event, start_workflow

    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    owed: deque[tuple[float, str]] = deque()

    def send_owed(until: float) -> None:
        while owed and owed[0][0] <= until:
            _, run_id = owed.popleft()
            try:
                send_event(run_id, "approval", {"approved": True})
            except Exception as error:
                print(json.dumps({"at": time.time(), "event_for": run_id, "error": f"{error!r}"}), flush=True)
                connections.close_all()

    began = time.monotonic()
    number = 0
    while not stopping:
        time.sleep(max(0.0, began + number / rate - time.monotonic()))
        workflow_type, data, options = MIX[number % len(MIX)]
        line: dict[str, Any] = {"at": time.time(), "type": workflow_type}
        started = time.monotonic()
        try:
            run = start_workflow(workflow_type, {**data, "n": number}, **options)
        except Exception as error:  # a refused start is what the test counts
            line["error"] = f"{type(error).__name__}: {error}"
            connections.close_all()
        else:
            line["id"] = str(run.pk)
            if workflow_type == "awaits_approval":
                owed.append((time.monotonic() + EVENT_AFTER, str(run.pk)))
        line["seconds"] = time.monotonic() - started
        print(json.dumps(line), flush=True)
        send_owed(time.monotonic())
        number += 1
    send_owed(float("inf"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
