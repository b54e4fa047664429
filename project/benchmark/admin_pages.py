"""``manage.py benchmark_admin``: the operator's pages on a table of millions of
rows, timed through Django's test client.

A scratch database (created beside the project's, every app migrated, dropped
at the end) is loaded with a month of a busy site's work: ``rows`` workflows
spread over ``days`` days, most completed, some failed or cancelled, a few
thousand pending and running at the end, each with its steps and tags (a
customer's of 1,000 on every run, "nightly" on 2%, "audit" on 0.01%), and four live
workers; beside them one run of 20,000 steps (``long_run``) and one parent of
10,000 children (``children``). Then each page of the admin (the list with
each filter, sort and search it offers, a workflow's page, the long run's and
the parent's, the workers page, the overview), each
report of the overview and the Prometheus metrics are fetched ``repeat`` times,
as a superuser of the scratch database; the table gives the median and the
slowest. No user data is read or written.
"""

from __future__ import annotations

import contextlib
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.test import Client, RequestFactory
from django.test.utils import override_settings
from django.urls import reverse

from orchestration.observability import metrics
from orchestration.reports import stats

from .internals import queue_database
from .scratch import ScratchDatabase

#: Workflow ids as the engine makes them (UUIDv7: the creation time's milliseconds first).
_UUID7 = (
    "(lpad(to_hex((extract(epoch FROM {t}) * 1000)::bigint), 12, '0') || '7' || substr({h}, 1, 3) || '8' "
    "|| substr({h}, 4, 15))::uuid"
)

#: A child's parent: the row created just before it (computed as that row computed its id).
_MOMENT = "(%(now)s::timestamptz - make_interval(secs => (%(total)s::bigint - {g}) * %(spacing)s::float8))"
_PARENT = _UUID7.format(t=_MOMENT.format(g="(g - 1)"), h="md5((g - 1)::text)")

# Rows first to last in creation order; the last 2,200 are the work in flight.
LOAD_CHUNK = f"""
WITH rows AS (
    SELECT g, t, h, {_UUID7.format(t="t", h="h")} AS id,
           CASE WHEN g %% 100 < 50 THEN 'order_fulfilment' WHEN g %% 100 < 75 THEN 'send_email'
                WHEN g %% 100 < 90 THEN 'sync_crm' WHEN g %% 100 < 97 THEN 'resize_image'
                WHEN g %% 100 < 99 THEN 'payout' WHEN g %% 10000 = 99 THEN 'yearly_report'
                ELSE 'import_feed' END AS workflow_type,
           CASE WHEN g > %(total)s::bigint - 200 THEN 'running' WHEN g > %(total)s::bigint - 2200 THEN 'pending'
                WHEN g %% 1000 < 20 THEN 'failed' WHEN g %% 1000 < 23 THEN 'cancelled' ELSE 'completed' END AS status,
           (40 + (g * 7919) %% 4000) * interval '1 ms' AS took
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) g,
         LATERAL (SELECT {_MOMENT.format(g="g")} AS t, md5(g::text) AS h) x
), new AS (
    INSERT INTO workflows (id, workflow_type, status, queue, input_data, output_data, current_step, attempts,
                           max_retries, created_at, updated_at, started_at, finished_at, run_after, waiting_for,
                           error_message, error_traceback, idempotency_key, worker_id, parent_id, tags)
    SELECT id, workflow_type, status,
           CASE workflow_type WHEN 'send_email' THEN 'emails' WHEN 'payout' THEN 'payments'
                WHEN 'yearly_report' THEN 'reports' ELSE 'default' END,
           jsonb_build_object('n', g),
           CASE WHEN status = 'completed' THEN '{{"ok": true}}'::jsonb END,
           CASE status WHEN 'completed' THEN %(steps)s WHEN 'pending' THEN 0 ELSE %(steps)s - 1 END,
           CASE status WHEN 'failed' THEN 4 WHEN 'pending' THEN 0 ELSE 1 END,
           3, t,
           CASE WHEN status = 'running' THEN now() - (g %% 7) * interval '1 s' ELSE t + took END,
           CASE WHEN status <> 'pending' THEN t + interval '5 ms' END,
           CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN t + took END,
           CASE WHEN status = 'pending' AND g %% 4 = 0 THEN '9999-01-01'::timestamptz
                WHEN status = 'pending' AND g %% 4 IN (1, 2) THEN now() + interval '1 hour' END,
           CASE WHEN status = 'pending' AND g %% 4 = 0 THEN 'event:approval' END,
           CASE WHEN status = 'failed' OR (status = 'pending' AND g %% 4 = 2)
                THEN 'ConnectionError: the supplier API did not answer' END,
           CASE WHEN status = 'failed' THEN repeat('  File "shop/steps.py", line 42, in call_supplier' || chr(10), 40)
                END,
           CASE WHEN workflow_type = 'send_email' THEN 'email-' || g END,
           CASE WHEN status = 'running' THEN 'bench-host-' || g %% 4 || ':1:cafe'
                WHEN status <> 'pending' THEN 'old-host-' || g %% 50 || ':1:dead' END,
           CASE WHEN g %% 100 = 42 THEN {_PARENT} END,
           jsonb_build_array('customer-' || g %% 1000)
               || CASE WHEN g %% 50 = 1 THEN '["nightly"]'::jsonb ELSE '[]'::jsonb END
               || CASE WHEN g %% 10000 = 3 THEN '["audit"]'::jsonb ELSE '[]'::jsonb END
    FROM rows
    RETURNING id, status, started_at, finished_at, current_step
)
INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, output_data, started_at, completed_at,
                            attempts, error_message)
SELECT new.id, s, 'step ' || s,
       CASE WHEN s <= new.current_step THEN 'completed' WHEN new.status = 'running' THEN 'running' ELSE 'failed' END,
       CASE WHEN s <= new.current_step THEN '{{"done": true}}'::jsonb END,
       new.started_at + (s - 1) * (new.finished_at - new.started_at) / %(steps)s,
       new.started_at + s * (new.finished_at - new.started_at) / %(steps)s,
       1,
       CASE WHEN s > new.current_step AND new.status <> 'running' THEN 'ConnectionError: timed out' END
FROM new, generate_series(1, %(steps)s::int) s
WHERE new.status <> 'pending' AND s <= new.current_step + 1
"""

# A run of ``long_run`` steps that failed at its last, after four attempts: an import that checkpoints each batch.
LONG_RUN = f"""
WITH run AS (
    INSERT INTO workflows (id, workflow_type, status, queue, input_data, current_step, attempts, max_retries,
                           created_at, updated_at, started_at, finished_at, error_message, worker_id)
    VALUES ({_UUID7.format(t="now()", h="md5('long run')")}, 'long_import', 'failed', 'default', '{{}}',
            %(steps)s - 1, 4, 3, now() - interval '6 hours', now(), now() - interval '6 hours', now(),
            'ConnectionError: the supplier API did not answer', 'old-host-1:1:dead')
    RETURNING id, started_at
)
INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, output_data, started_at, completed_at,
                            attempts, error_message)
SELECT run.id, s, 'import batch ' || s, CASE WHEN s = %(steps)s THEN 'failed' ELSE 'completed' END,
       CASE WHEN s < %(steps)s THEN jsonb_build_object('batch', s, 'rows', 500) END,
       run.started_at + (s - 1) * interval '1 s', run.started_at + (s - 1) * interval '1 s' + interval '900 ms', 1,
       CASE WHEN s = %(steps)s THEN 'ConnectionError: the supplier API did not answer' END
FROM run, generate_series(1, %(steps)s::int) s
"""

# A run waiting for its ``children`` children, one in ten of them failed.
PARENT = f"""
WITH parent AS (
    INSERT INTO workflows (id, workflow_type, status, queue, input_data, current_step, created_at, updated_at,
                           started_at, run_after, waiting_for)
    VALUES ({_UUID7.format(t="now()", h="md5('parent')")}, 'fan_out', 'pending', 'default', '{{}}', 1,
            now() - interval '1 hour', now(), now() - interval '1 hour', '9999-01-01', 'children')
    RETURNING id
), step AS (
    INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, output_data, started_at, completed_at,
                                attempts)
    SELECT id, s, 'step ' || s, CASE WHEN s = 1 THEN 'completed' ELSE 'pending' END,
           CASE WHEN s = 1 THEN '{{"ok": true}}'::jsonb ELSE '{{"children": true}}'::jsonb END,
           now() - interval '1 hour', CASE WHEN s = 1 THEN now() - interval '59 minutes' END, 1
    FROM parent, generate_series(1, 2) s
)
INSERT INTO workflows (id, workflow_type, status, queue, input_data, current_step, attempts, max_retries, created_at,
                       updated_at, started_at, finished_at, error_message, parent_id)
SELECT {_UUID7.format(t="now()", h="md5('child ' || g)")}, 'sync_crm',
       CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'completed' END, 'default', jsonb_build_object('n', g), 1, 1, 3,
       now() - interval '1 hour', now(), now() - interval '1 hour', now(),
       CASE WHEN g %% 10 = 0 THEN 'ConnectionError: the CRM did not answer' END, parent.id
FROM parent, generate_series(1, %(children)s::int) g
"""

WORKERS = """
INSERT INTO workflow_workers (id, host, pid, queues, concurrency, version, started_at, last_seen_at)
SELECT 'bench-host-' || n || ':1:cafe', 'bench-host-' || n, 1, NULL, 8, 'benchmark', now() - interval '1 day', now()
FROM generate_series(0, 3) n
"""


@dataclass
class Options:
    rows: int = 10_000_000
    days: int = 30
    steps: int = 2
    repeat: int = 3
    chunk: int = 500_000
    keep: bool = False
    #: The steps of the one long run, and the children of the one large parent, loaded beside the rows.
    long_run: int = 20_000
    children: int = 10_000


@dataclass
class Timing:
    page: str
    seconds: list[float] = field(default_factory=list)
    status: int = 200

    @property
    def median_ms(self) -> float:
        return statistics.median(self.seconds) * 1000

    @property
    def max_ms(self) -> float:
        return max(self.seconds) * 1000


class ScratchRouter:
    """Every query of every app to the scratch database: users, sessions and the admin's log too."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return self.alias

    db_for_write = db_for_read

    def allow_relation(self, *args: Any, **hints: Any) -> bool:
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == self.alias


class AdminBenchmark:
    def __init__(self, options: Options, say: Callable[[str], None]) -> None:
        self.options = options
        self.say = say
        self.database = ScratchDatabase(f"orchestration_benchmark_{secrets.token_hex(3)}_admin", queue_database())
        self.facts: dict[str, Any] = {}

    def run(self) -> list[Timing]:
        database = self.database
        with self._routed(), database.created(keep=self.options.keep, every_app=True):
            self.say(f"scratch database {database.name}")
            self._load()
            return self._time_everything()

    @contextlib.contextmanager
    def _routed(self) -> Iterator[None]:
        alias = self.database.alias
        orchestration_settings = {**getattr(settings, "ORCHESTRATION", {}), "DATABASE": alias}
        hosts = [*settings.ALLOWED_HOSTS, "testserver"]
        with override_settings(
            DATABASE_ROUTERS=[ScratchRouter(alias)], ORCHESTRATION=orchestration_settings, ALLOWED_HOSTS=hosts
        ):
            yield

    def _load(self) -> None:
        opts, database = self.options, self.database
        spacing = opts.days * 86400 / opts.rows
        now = database.scalar("SELECT now()")  # one moment for every chunk: a child finds its parent's id
        started = time.monotonic()
        for first in range(1, opts.rows + 1, opts.chunk):
            last = min(opts.rows, first + opts.chunk - 1)
            params = {"first": first, "last": last, "total": opts.rows, "spacing": spacing, "steps": opts.steps}
            params["now"] = now
            database.execute(LOAD_CHUNK, params)
            self.say(f"loaded {last:,} of {opts.rows:,} workflows ({time.monotonic() - started:.0f} s)")
        database.execute(WORKERS)
        database.execute(LONG_RUN, {"steps": opts.long_run})
        database.execute(PARENT, {"children": opts.children})
        database.execute("VACUUM (ANALYZE) workflows, workflow_steps, workflow_workers, workflow_tags")
        self.facts["load_seconds"] = round(time.monotonic() - started)
        self.facts["steps"] = database.scalar("SELECT reltuples::bigint FROM pg_class WHERE relname = 'workflow_steps'")
        self.facts["size"] = database.scalar("SELECT pg_size_pretty(pg_database_size(current_database()))")
        self.facts.update(database.server_facts())
        self.say(f"loaded and analyzed in {self.facts['load_seconds']} s: {self.facts['size']}")

    def _samples(self) -> dict[str, str]:
        one = self.database.one
        failed = one("SELECT id FROM workflows WHERE status = 'failed' ORDER BY created_at DESC LIMIT 1")[0]
        parent = one("SELECT parent_id FROM workflows WHERE parent_id IS NOT NULL ORDER BY created_at LIMIT 1")[0]
        key = one("SELECT idempotency_key FROM workflows WHERE idempotency_key IS NOT NULL LIMIT 1")[0]
        long_run = one("SELECT id FROM workflows WHERE workflow_type = 'long_import' LIMIT 1")[0]
        large_parent = one("SELECT id FROM workflows WHERE workflow_type = 'fan_out' LIMIT 1")[0]
        return {
            "failed": str(failed),
            "parent": str(parent),
            "key": key,
            "worker": "bench-host-1:1:cafe",
            "long_run": str(long_run),
            "large_parent": str(large_parent),
        }

    def pages(self, samples: dict[str, str]) -> list[tuple[str, dict[str, str]]]:
        """The list's URL parameters to time: each filter, sort and search it offers."""
        week_ago = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 7 * 86400))
        return [
            ("newest first", {}),
            ("page 2", {"p": "2"}),
            ("page 100", {"p": "100"}),
            ("oldest first", {"o": "6"}),
            ("status = failed", {"status__exact": "failed"}),
            ("status = cancelled", {"status__exact": "cancelled"}),
            ("status = pending", {"status__exact": "pending"}),
            ("running, by heartbeat", {"status__exact": "running", "o": "7"}),
            ("pending: due now", {"pending": "due"}),
            ("pending: waiting for an event", {"pending": "event"}),
            ("pending: retrying", {"pending": "retrying"}),
            ("type = order_fulfilment (50 %)", {"workflow_type": "order_fulfilment"}),
            ("type = yearly_report (0.01 %)", {"workflow_type": "yearly_report"}),
            ("queue = emails (25 %)", {"queue": "emails"}),
            ("queue = reports (0.01 %)", {"queue": "reports"}),
            ("created in the last 7 days", {"created_at__gte": week_ago}),
            ("failed, type = payout", {"status__exact": "failed", "workflow_type": "payout"}),
            ("failed, queue = payments", {"status__exact": "failed", "queue": "payments"}),
            ("tag = nightly (2 %)", {"tag": "nightly"}),
            ("tag = customer-7 (0.1 %)", {"tag": "customer-7"}),
            ("tag = audit (0.01 %)", {"tag": "audit"}),
            ("failed, tag = customer-7", {"status__exact": "failed", "tag": "customer-7"}),
            ("children of a workflow", {"parent": samples["parent"]}),
            ("held by a worker", {"worker": samples["worker"]}),
            ("search: id prefix (8)", {"q": samples["failed"][:8]}),
            ("search: whole id", {"q": samples["failed"]}),
            ("search: type", {"q": "payout"}),
            ("search: idempotency key", {"q": samples["key"]}),
            ("search: id suffix (8)", {"q": samples["failed"][-8:]}),
            ("search: part of a type", {"q": "yout"}),
            ("search: error text", {"q": "unreachable"}),
            ("search: tag", {"q": "customer-7"}),
        ]

    def _time_everything(self) -> list[Timing]:
        from django.contrib.auth import get_user_model

        user_model = get_user_model()
        user = user_model._default_manager.db_manager(self.database.alias).create_superuser(
            "benchmark", "benchmark@example.com", secrets.token_hex(8)
        )
        client = Client()
        client.force_login(user)
        samples = self._samples()
        admin = "admin:orchestration_workflow"
        list_url = reverse(f"{admin}_changelist")
        timings = [self._time(client, f"list: {name}", list_url, params) for name, params in self.pages(samples)]
        opts = self.options
        page = f"{admin}_change"
        long_run, large_parent = (
            reverse(page, args=[samples["long_run"]]),
            reverse(page, args=[samples["large_parent"]]),
        )
        middle = opts.long_run // 2
        timings += [
            self._time(client, "a workflow's page", reverse(page, args=[samples["failed"]])),
            self._time(client, f"a run of {opts.long_run:,} steps", long_run),
            self._time(
                client,
                f"a run of {opts.long_run:,} steps, its steps {middle:,} to {middle + 49:,}",
                long_run,
                {"steps": f"{middle}:{middle + 49}"},
            ),
            self._time(client, f"a parent of {opts.children:,} children", large_parent),
            self._time(
                client,
                f"list: the children of a parent of {opts.children:,}",
                list_url,
                {"parent": samples["large_parent"]},
            ),
            self._time(client, "workers page", reverse("admin:orchestration_workflowworker_changelist")),
            self._time(client, "overview page", reverse(f"{admin}_overview")),
        ]
        for name, report in (
            ("success rate, 24 h", stats.success_rate),
            ("stuck workflows", stats.stuck_workflows),
            ("step durations, last 10,000 workflows", stats.recent_step_durations),
            ("step durations, every step (workflow_stats)", stats.step_durations),
            ("queue depth", stats.queue_depth),
            ("waiting counts", stats.waiting_counts),
            ("outcomes per hour, 24 h", lambda: stats.hourly_outcomes(24)),
            ("table health", stats.table_health),
            ("oldest pending", stats.oldest_pending),
            ("workflow types (type filter)", stats.workflow_types),
        ):
            timings.append(self._repeat(f"report: {name}", report))
        request = RequestFactory().get("/metrics/")
        timing = self._repeat("metrics view", lambda: metrics.metrics_view(request))
        timings.append(timing)
        return timings

    def _time(self, client: Client, name: str, url: str, params: dict[str, str] | None = None) -> Timing:
        timing = Timing(name)
        for _ in range(self.options.repeat):
            started = time.perf_counter()
            response = client.get(url, params or {})
            timing.seconds.append(time.perf_counter() - started)
            timing.status = response.status_code
        self.say(f"{name}: {timing.median_ms:.0f} ms ({timing.status})")
        return timing

    def _repeat(self, name: str, call: Callable[[], Any]) -> Timing:
        timing = Timing(name)
        for _ in range(self.options.repeat):
            started = time.perf_counter()
            result = call()
            timing.seconds.append(time.perf_counter() - started)
            timing.status = getattr(result, "status_code", 200)
        self.say(f"{name}: {timing.median_ms:.0f} ms")
        return timing


def render(timings: list[Timing], options: Options, facts: dict[str, Any]) -> str:
    lines = [
        f"Admin pages on {options.rows:,} workflows ({facts.get('steps', '?'):,} steps, {facts.get('size', '?')}), "
        f"over {options.days} days; median and slowest of {options.repeat} (loaded in {facts.get('load_seconds')} s; "
        f"PostgreSQL {facts.get('server_version')}, {facts.get('cpus')} CPUs)",
        "",
        "| page | median ms | slowest ms | status |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [f"| {t.page} | {t.median_ms:.0f} | {t.max_ms:.0f} | {t.status} |" for t in timings]
    return "\n".join(lines) + "\n"
