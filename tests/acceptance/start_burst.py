"""One process of a burst of starts of one key: ``python -m tests.acceptance.start_burst
PROCESS AT UNIQUE DEBOUNCED`` waits until the Unix time AT, makes UNIQUE starts with
``unique_while_active`` and then DEBOUNCED starts with ``debounce``, and prints
what each returned as a JSON line: ``[option, n, run id]``."""

from __future__ import annotations

import json
import os
import sys
import time

import django


def main(process: int, at: float, unique: int, debounced: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from orchestration import start_workflow

    time.sleep(max(0.0, at - time.time()))  # every process starts together
    for n in range(unique):
        run = start_workflow("echo", {"process": process, "n": n}, idempotency_key="unique", unique_while_active=True)
        print(json.dumps(["unique", n, str(run.pk)]), flush=True)
    for n in range(debounced):
        run = start_workflow("echo", {"process": process, "n": n}, idempotency_key="debounced", debounce=60)
        print(json.dumps(["debounce", n, str(run.pk)]), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
