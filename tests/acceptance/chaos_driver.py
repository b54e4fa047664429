"""The chaos run: worker processes killed with SIGKILL and PostgreSQL restarted
while 500 three-step workflows run; then every guarantee is checked.

It needs a PostgreSQL it may restart, so it starts a private one (the embedded
``pgserver`` binaries run by project.embedded_db, in a temporary directory) whatever DATABASE_URL says.
Run it through ``pytest -m chaos`` or directly:

    python -m tests.acceptance.chaos_driver --workflows 500 --processes 3
"""

from __future__ import annotations

import argparse
import atexit
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]

WORKER_SETTINGS = {
    "ORCHESTRATION_STUCK_AFTER": "4",
    "ORCHESTRATION_HEARTBEAT_INTERVAL": "0.5",
    "ORCHESTRATION_POLL_INTERVAL": "0.2",
    "ORCHESTRATION_RETRY_BACKOFF": "0.1",
    "ORCHESTRATION_RETRY_BACKOFF_MAX": "1",
    "ORCHESTRATION_MAX_WORKER_DEATHS": "50",
}


def start_private_postgres(directory: Path) -> tuple[Any, str]:
    from project.embedded_db import EmbeddedPostgres

    directory.chmod(0o711)  # the server's OS account, under root, passes through to its folder
    # The data goes once the server stopped (exit handlers run LIFO); the workers' logs stay.
    atexit.register(shutil.rmtree, directory / "pgdata", ignore_errors=True)
    server = EmbeddedPostgres(directory / "pgdata")
    settings = server.join()
    return server, f"postgres://postgres:{settings['PASSWORD']}@{quote(settings['HOST'], safe='')}/postgres"


def restart_postgres(server: Any) -> None:
    server.restart()


class WorkerPool:
    def __init__(self, size: int, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.started = 0
        self.logs: dict[int, Path] = {}
        self.processes = [self._spawn() for _ in range(size)]

    def _spawn(self) -> subprocess.Popen[bytes]:
        self.started += 1
        path = self.log_dir / f"worker-{self.started}.log"
        log = open(path, "wb")  # noqa: SIM115 (closed with the process)
        command = [sys.executable, "manage.py", "runworkers", "--concurrency", "4", "--poll-interval", "0.2"]
        process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.logs[process.pid] = path
        return process

    def _wait_until_started(self, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
        """Until its signal handlers are in place (it logs "starting" after): a
        SIGTERM while Python and Django still load ends it as SIGTERM's default does."""
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            if " starting: " in self.logs[process.pid].read_text(errors="replace"):
                return
            time.sleep(0.1)

    def kill_one_and_restart(self) -> None:
        index = random.randrange(len(self.processes))
        self.processes[index].send_signal(signal.SIGKILL)
        self.processes[index].wait()
        self.processes[index] = self._spawn()

    def stop(self) -> list[int]:
        for process in self.processes:
            self._wait_until_started(process)
            process.send_signal(signal.SIGTERM)
        return [process.wait(timeout=60) for process in self.processes]


def count_by_status() -> dict[str, int]:
    from django.db import OperationalError, connections
    from django.db.models import Count

    from orchestration.models import Workflow

    try:
        return dict(Workflow.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    except OperationalError:
        connections.close_all()
        return {}


# What a run of killed or replaced workers must leave: each count by its name.
CHECKS = {
    "workflows": "SELECT count(*) FROM workflows",
    "completed": "SELECT count(*) FROM workflows WHERE status = 'completed'",
    "left running": "SELECT count(*) FROM workflows WHERE status = 'running'",
    "retried (attempts > 1)": "SELECT count(*) FROM workflows WHERE attempts > 1",
    "step rows": "SELECT count(*) FROM workflow_steps",
    "completed step rows": "SELECT count(*) FROM workflow_steps WHERE status = 'completed'",
    "steps with more than one row": (
        "SELECT count(*) FROM (SELECT 1 FROM workflow_steps GROUP BY workflow_id, step_number "
        "HAVING count(*) > 1) duplicated"
    ),
    "step bodies run": "SELECT count(*) FROM testapp_steprun",
    "step bodies re-run (before their checkpoint)": (
        "SELECT count(*) - count(DISTINCT (workflow_id, step_number)) FROM testapp_steprun"
    ),
    "bodies run after their checkpoint": (
        "SELECT count(*) FROM testapp_steprun r JOIN workflow_steps s "
        "ON s.workflow_id = r.workflow_id AND s.step_number = r.step_number "
        "WHERE s.status = 'completed' AND r.created_at > s.completed_at"
    ),
}


def verify(expected: int) -> dict[str, int]:
    from django.db import connection

    def scalar(sql: str) -> int:
        with connection.cursor() as cursor:
            cursor.execute(sql)
            return int(cursor.fetchone()[0])

    return {**{name: scalar(sql) for name, sql in CHECKS.items()}, "expected workflows": expected}


def prepare(url: str, workflows: int, step_seconds: float) -> None:
    """Point this process at ``url``, create the tables and ``workflows``
    three-step workflows whose steps each sleep ``step_seconds``."""
    os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="tests.settings")
    os.environ.pop("DATABASE_NAME", None)
    os.environ.pop("TEST_DATABASE_NAME", None)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    from orchestration.models import Workflow

    call_command("migrate", run_syncdb=True, verbosity=0)
    Workflow.objects.bulk_create(
        Workflow(workflow_type="three_steps", input_data={"n": n, "sleep": step_seconds}) for n in range(workflows)
    )


def report(result: dict[str, int], workflows: int) -> list[str]:
    """Print ``verify``'s counts; return the guarantees they break."""
    for name, value in result.items():
        print(f"chaos: {name:<45} {value}", flush=True)
    problems = []
    if result["completed"] != workflows:
        problems.append(f"only {result['completed']} of {workflows} workflows completed")
    if result["left running"]:
        problems.append(f"{result['left running']} workflows left running")
    if result["completed step rows"] != 3 * workflows or result["step rows"] != 3 * workflows:
        problems.append("not exactly one completed row per step")
    if result["steps with more than one row"]:
        problems.append("duplicated step rows")
    if result["bodies run after their checkpoint"]:
        problems.append("a step body ran again after its checkpoint was written")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workflows", type=int, default=500)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=2.0)
    parser.add_argument("--step-seconds", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=300.0)
    options = parser.parse_args(argv)

    directory = Path(tempfile.mkdtemp(prefix="chaos-"))
    server, url = start_private_postgres(directory)
    prepare(url, options.workflows, options.step_seconds)
    from django.db import connections

    print(f"chaos: {options.workflows} three-step workflows, {options.processes} worker processes", flush=True)

    pool = WorkerPool(options.processes, {**os.environ, **WORKER_SETTINGS}, directory)
    kills = restarts = 0
    started = time.monotonic()
    deadline = started + options.timeout
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        time.sleep(options.kill_every)
        counts = count_by_status()
        if counts and counts.get("completed", 0) == options.workflows:
            break
        pool.kill_one_and_restart()
        kills += 1
        if not restarts and counts.get("completed", 0) >= options.workflows // 3:
            restart_postgres(server)
            connections.close_all()
            restarts += 1
            print(f"chaos: PostgreSQL restarted at {time.monotonic() - started:.1f}s", flush=True)
    exit_codes = pool.stop()
    elapsed = time.monotonic() - started
    print(
        f"chaos: {kills} SIGKILLs, {restarts} PostgreSQL restart(s), {pool.started} worker starts, "
        f"{elapsed:.1f}s, final worker exit codes {exit_codes}",
        flush=True,
    )
    connections.close_all()
    problems = report(verify(options.workflows), options.workflows)
    if kills == 0 or restarts == 0:
        problems.append("the run finished before any kill or database restart happened")
    if any(code != 0 for code in exit_codes):
        problems.append(f"a worker did not exit cleanly on SIGTERM: {exit_codes}")
    for problem in problems:
        print(f"chaos: FAILED: {problem}", flush=True)
    if problems:
        print(f"chaos: worker logs kept in {directory}", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
