"""``manage.py benchmark``: throughput, latency and memory of real ``runworkers``
processes, each figure beside the limit a bare psycopg loop reaches on the same
PostgreSQL in the same run.

Everything happens in three scratch databases created on the server of the
project's ``ORCHESTRATION["DATABASE"]`` and dropped at the end: "empty" for the
main figures, "loaded" with finished workflows pre-loaded, and "limited",
whose queue has flow control's limits (so that the workers of the other two
never claim with the limit-aware statement); all measured alternately under
the same conditions. No user data is read or written.
"""

from __future__ import annotations

import contextlib
import secrets
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from orchestration import start_workflow, start_workflows
from orchestration.conf import conf

from . import fan_out, limit, not_due, results, starts
from .cpu import CpuMeter, server_backends
from .figures import Figure
from .internals import claim_sql_for_explain, queue_database
from .scratch import ScratchDatabase
from .workers import Workers
from .workflows import HISTORY_TYPE, WORKFLOW_TYPE, register

ENQUEUE_PROBE = "INSERT INTO workflows (workflow_type, input_data) SELECT %s, '{}' FROM generate_series(1, %s)"
#: The limits of the "limited" database's queue for a measurement (its workflows are on ``default``).
SET_LIMITS = """
INSERT INTO workflow_queues (name, concurrency, key_concurrency)
VALUES ('default', %(concurrency)s, %(key_concurrency)s)
ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency, key_concurrency = excluded.key_concurrency
"""
#: Keys of the per-key measurement, each limited to one run at a time.
KEYS = 100
#: A concurrency limit no run of a measurement reaches: what flow control costs when it does not bind.
NOT_BINDING = 10_000
#: The drains on the "limited" database: an unlimited one, then under each of flow control's limits.
FLOW_CONTROL = ("no_limit", "limit_not_binding", "concurrency_limit", "key_limit")
#: What ``Options.only`` may name: the drains of each round, in order, then the phases around them.
MEASUREMENTS = ("limit_3", "multi_step", "limit_1", "loaded", "one_step", "not_due", "backlog", *FLOW_CONTROL,
                "single_enqueue", "latency", "results", "wake", "fan_out", "rss")  # fmt: skip


@dataclass
class Options:
    workflows: int = 2000
    steps: int = 3
    processes: int = 2
    threads: int = 4
    finished_rows: int = 1_000_000
    backlog: int = 10_000
    latency_samples: int = 200
    single_enqueues: int = 500
    #: Even, so that the two drains of each ratio run as often in one order as in the other.
    repeat: int = 6
    rss_concurrency: int = 8
    worker_args: list[str] = field(default_factory=list)
    keep: bool = False
    #: VACUUM the scratch tables this often (seconds; 0: never), for a server whose autovacuum is off.
    vacuum_every: float = 0
    #: Measure flow control's limits too (a third database and its workers).
    flow_control: bool = True
    #: Runs waiting (timers, events, delayed starts, backoffs, parents) in front of
    #: the one-step drain of a fourth database, "waiting" (0: none, no such database).
    not_due: int = 0
    #: Timers ending at once, then as many new runs, each drained by the "waiting" database's workers (0: none).
    wake: int = 0
    #: Children of the fan-out's parent, beside as many independent runs (0: no fan-out measured).
    fan_out: int = 0
    #: Every step of the benchmark's runs reports progress once (``ctx.set_progress``).
    progress: bool = False
    #: Only these measurements (``MEASUREMENTS``; empty: all of them).
    only: list[str] = field(default_factory=list)

    def wants(self, name: str) -> bool:
        return not self.only or name in self.only


class Benchmark:
    """One run: ``run`` creates the scratch databases and worker processes,
    measures in rounds, and returns the figures (the claim plan in ``plan``)."""

    def __init__(self, options: Options, say: Callable[[str], None]) -> None:
        self.options = options
        self.say = say
        self.figures: dict[str, Figure] = {}
        self.samples: dict[str, list[float]] = {}
        #: The worker processes' pids, by scratch database label.
        self.worker_pids: dict[str, list[int]] = {}
        self.plan: list[str] = []
        self.server: dict[str, str] = {}
        self.log_dir = Path(tempfile.mkdtemp(prefix="orchestration-benchmark-"))
        prefix = f"orchestration_benchmark_{secrets.token_hex(3)}"
        self.empty = ScratchDatabase(f"{prefix}_empty", queue_database())
        self.loaded = ScratchDatabase(f"{prefix}_loaded", queue_database())
        self.limited = ScratchDatabase(f"{prefix}_limited", queue_database())
        self.waiting = ScratchDatabase(f"{prefix}_waiting", queue_database())

    # -- the run ---------------------------------------------------------------

    def run(self) -> list[Figure]:
        register()  # in this process only: start_workflows() refuses an unknown type
        opts = self.options
        flow_control = opts.flow_control
        limited_processes = opts.processes if flow_control else 0
        waiting = bool(opts.not_due or opts.wake)
        with (
            self.empty.created(keep=opts.keep),
            self.loaded.created(keep=opts.keep),
            self.limited.created(keep=opts.keep) if flow_control else contextlib.nullcontext(),
            self.waiting.created(keep=opts.keep) if waiting else contextlib.nullcontext(),
        ):
            self.say(f"scratch databases {self.empty.name}, {self.loaded.name}; worker logs in {self.log_dir}")
            self.server = self.empty.server_facts()
            stop_vacuum = self._vacuum_in_background()
            if opts.wants("single_enqueue"):
                self._enqueue_single()
            if opts.wants("loaded"):
                self._load_finished_rows()
            if opts.not_due:
                self._load_waiting_rows()
            if flow_control:  # before its workers start, so that they claim with the limit-aware statement
                self._limit(concurrency=opts.processes * opts.threads)
            self._checkpoint()
            with (
                Workers(self.empty, opts.processes, opts.threads, opts.worker_args, self.log_dir, "empty") as empty,
                Workers(self.loaded, opts.processes, opts.threads, opts.worker_args, self.log_dir, "loaded") as loaded,
                Workers(
                    self.limited, limited_processes, opts.threads, opts.worker_args, self.log_dir, "limited"
                ) as limited,
                Workers(
                    self.waiting,
                    opts.processes if waiting else 0,
                    opts.threads,
                    opts.worker_args,
                    self.log_dir,
                    "waiting",
                ) as waiting_workers,
            ):
                for workers in (empty, loaded, limited, waiting_workers):
                    self.worker_pids[workers.database.label] = [process.pid for process in workers.processes]
                for round_number in range(1, opts.repeat + 1):
                    self.say(f"round {round_number} of {opts.repeat}")
                    measurements = self._round()
                    if round_number % 2 == 0:  # every other round backwards: no figure always follows the same one
                        measurements.reverse()
                    for name, measure in measurements:
                        self.samples.setdefault(name, []).append(measure())
                if opts.wants("latency"):
                    self._latency()
                if opts.wants("results"):
                    self._result_waits()
                if opts.wake and opts.wants("wake"):
                    self._wake()
                if opts.fan_out and opts.wants("fan_out"):
                    self._fan_out(empty)
                self._figures_from(self.samples)
                if not opts.only:
                    self._hot_updates()
                self.figures["worker_rss"] = Figure(
                    "peak RSS of a worker process", max(empty.peak_rss_mb()), "MB", samples=empty.peak_rss_mb()
                )
            if opts.wants("rss"):
                self._rss_at_concurrency()
            stop_vacuum()
        return list(self.figures.values())

    def _vacuum_in_background(self) -> Callable[[], None]:
        """With ``vacuum_every``, stand in for an autovacuum that is off."""
        stop = threading.Event()

        def vacuum() -> None:
            while not stop.wait(self.options.vacuum_every):
                for database in (self.empty, self.loaded):
                    with contextlib.suppress(psycopg.Error):
                        database.execute("VACUUM workflows, workflow_steps")

        thread = threading.Thread(target=vacuum, name="benchmark-vacuum", daemon=True)
        if self.options.vacuum_every > 0:
            thread.start()

        def stop_vacuum() -> None:
            stop.set()
            if thread.is_alive():
                thread.join()

        return stop_vacuum

    def _round(self) -> list[tuple[str, Callable[[], float]]]:
        opts = self.options
        conninfo = self.empty.conninfo()
        concurrency = dict(processes=opts.processes, threads=opts.threads)
        # Each ratio's two drains next to each other (``_figures_from``).
        measurements = [
            (
                "limit_3",
                lambda: limit.measure(conninfo, jobs=opts.workflows, variant="three_transactions", **concurrency),
            ),
            ("multi_step", lambda: self._drain(self.empty, opts.workflows, opts.steps, measured="multi_step")),
            ("limit_1", lambda: limit.measure(conninfo, jobs=opts.workflows, variant="one_transaction", **concurrency)),
            ("loaded", lambda: self._drain(self.loaded, opts.workflows, 1, measured="loaded")),
            ("one_step", lambda: self._drain(self.empty, opts.workflows, 1, measured="one_step")),
            ("not_due", lambda: self._drain(self.waiting, opts.workflows, 1, measured="not_due")),
            (
                "backlog",
                lambda: self._drain(self.empty, opts.backlog, 1, enqueue_key="bulk_enqueue", measured="backlog"),
            ),
            ("no_limit", lambda: self._drain_limited("no_limit")),
            ("limit_not_binding", lambda: self._drain_limited("limit_not_binding", concurrency=NOT_BINDING)),
            (
                "concurrency_limit",
                lambda: self._drain_limited("concurrency_limit", concurrency=opts.processes * opts.threads),
            ),
            ("key_limit", lambda: self._drain_limited("key_limit", key_concurrency=1)),
        ]
        return [
            (name, measure)
            for name, measure in measurements
            if opts.wants(name)
            and (opts.flow_control or name not in FLOW_CONTROL)
            and (opts.not_due or name != "not_due")
        ]

    def _figures_from(self, samples: dict[str, list[float]]) -> None:
        """The medians, and each ratio as the median of the rounds' ratios:
        its two drains ran next to each other in every round, so a ratio
        carries little of the machine's speed, which moves from second to second."""
        opts = self.options
        median = {name: statistics.median(values) for name, values in samples.items()}

        def add(key: str, metric: str, unit: str, ratio_of: str | None = None, target: Any = None) -> None:
            if key not in median:
                return
            ratio = _paired_ratio(samples[key], samples[ratio_of]) if ratio_of in median else None
            label = self.figures[ratio_of].metric if ratio_of and ratio_of in self.figures else ratio_of
            self.figures[key] = Figure(metric, median[key], unit, label, ratio, target, samples[key])
            self._cpu_figures(key, samples)

        concurrency = f"{opts.processes} processes x {opts.threads} threads"
        add("limit_1", f"limit: psycopg loop, 1 transaction a job ({concurrency})", "jobs/s")
        add("limit_3", "limit: psycopg loop, 3 transactions a job", "jobs/s")
        add("bulk_enqueue", f"enqueue, start_workflows() of {opts.backlog}", "workflows/s", target=(">=", 30000))
        add("one_step", "one-step workflows, runworkers", "workflows/s", "limit_1", (">=", 0.55))
        add(
            "multi_step",
            f"{opts.steps}-step workflows, runworkers",
            "workflows/s",
            "limit_3",
            (">=", 0.50) if opts.steps == 3 else None,
        )
        add(
            "loaded",
            f"one-step, {opts.finished_rows} finished rows in the table",
            "workflows/s",
            "one_step",
            (">=", 0.95),
        )
        add("backlog", f"one-step, draining a {opts.backlog} backlog", "workflows/s", "one_step", (">=", 0.95))
        add("not_due", f"one-step, {opts.not_due} runs waiting in front", "workflows/s", "one_step", (">=", 0.90))
        if not opts.flow_control:
            return
        threads = opts.processes * opts.threads
        add("no_limit", "one-step, flow control's workers, no limit", "workflows/s", "one_step")
        add("limit_not_binding", f"one-step, queue concurrency {NOT_BINDING} (not binding)", "workflows/s", "no_limit",
            (">=", 0.95))  # fmt: skip
        add("concurrency_limit", f"one-step, queue concurrency {threads} (= threads)", "workflows/s", "no_limit",
            (">=", 0.80))  # fmt: skip
        add("key_limit", f"one-step, {KEYS} keys of key_concurrency 1", "workflows/s", "no_limit", (">=", 0.60))

    # -- phases ----------------------------------------------------------------

    def _enqueue_single(self) -> None:
        """Single starts, sync and async, each beside the bare INSERT loop of the same run (``starts``)."""
        timings = {kind: sorted(values) for kind, values in starts.measure(self.empty, WORKFLOW_TYPE,
                   self.options.single_enqueues).items()}  # fmt: skip
        bare = timings["bare"]
        self.figures["single_enqueue_bare"] = Figure(
            "limit: psycopg single-row INSERT loop, one connection", len(bare) / sum(bare), "inserts/s"
        )
        self._percentiles("single_enqueue_bare", "  INSERT", bare)
        for kind, call in (("start", "start_workflow()"), ("astart", "astart_workflow()")):
            key = "single_enqueue" if kind == "start" else "single_enqueue_async"
            values = timings[kind]
            self.figures[key] = Figure(
                f"enqueue, {call} one at a time", len(values) / sum(values), "workflows/s",
                self.figures["single_enqueue_bare"].metric, sum(bare) / len(bare) / (sum(values) / len(values)),
                (">=", 0.6),
            )  # fmt: skip
            self._percentiles(key, f"  {call}", values, target=("<=", 1.5))
            # The machine's own tail (the commit's fsync on a shared server) beside ours: 1 is the INSERT's tail.
            self.figures[f"{key}_tail"] = Figure(
                f"  {call} p99/p50 over the INSERT's p99/p50",
                (self.figures[f"{key}_p99"].ratio or 0.0) / (self.figures["single_enqueue_bare_p99"].ratio or 1.0),
                "x",
            )

    def _percentiles(self, key: str, what: str, ordered: list[float], target: Any = None) -> None:
        """The p50 and p99 of ``ordered`` (seconds) in ms; the p99 beside the p50, as a ratio, against ``target``."""
        p50, p99 = statistics.median(ordered) * 1000, _percentile(ordered, 0.99) * 1000
        self.figures[f"{key}_p50"] = Figure(f"{what} p50", p50, "ms")
        self.figures[f"{key}_p99"] = Figure(
            f"{what} p99", p99, "ms", f"{what} p50", p99 / p50, target, [value * 1000 for value in ordered]
        )

    def _load_finished_rows(self) -> None:
        rows = self.options.finished_rows
        self.say(f"loading {rows} finished workflows (one step each) into {self.loaded.name}")
        started = time.perf_counter()
        self.loaded.load_finished(HISTORY_TYPE, rows)
        self.figures["load"] = Figure(
            "pre-load of finished workflows (INSERT ... generate_series)",
            rows / (time.perf_counter() - started),
            "rows/s",
        )
        self.plan = self._claim_plan()

    def _claim_plan(self) -> list[str]:
        """EXPLAIN (ANALYZE, BUFFERS) of the claim on the loaded table, with a
        backlog inserted in the same (rolled back) transaction."""
        session, sql, params = claim_sql_for_explain(self.options.threads)
        probe = min(self.options.backlog, 1000)
        with psycopg.connect(self.loaded.conninfo()) as conn:
            conn.execute(ENQUEUE_PROBE, [WORKFLOW_TYPE, probe])
            for statement in session:  # as the workers plan it
                conn.execute(statement)
            plan = [row[0] for row in conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params)]
            conn.rollback()
        return plan

    def _load_waiting_rows(self) -> None:
        rows = self.options.not_due
        self.say(f"loading {rows} waiting workflows (timers, events, delayed starts, backoffs, parents)")
        rate = not_due.load_waiting(self.waiting, WORKFLOW_TYPE, rows)
        self.figures["load_waiting"] = Figure(
            "pre-load of waiting workflows (INSERT ... generate_series)", rate, "rows/s"
        )
        for figure in not_due.waiting_size(self.waiting):
            self.figures[figure.metric] = figure

    def _wake(self) -> None:
        """``wake`` timers ending at once, then as many new runs started at once,
        on the "waiting" database (behind the runs of ``not_due``, if any): the rate of each
        drain, and the longest time no run started while the timers woke."""
        rows = self.options.wake
        drained = {}
        for timers in (False, True):
            self.say(f"  {rows} {'timers ending' if timers else 'new runs starting'} at once")
            drained[timers] = not_due.drain_due(self.waiting, WORKFLOW_TYPE, rows, timers, timeout=120 + rows / 50)
        (new, new_gap), (woken, woken_gap) = drained[False], drained[True]
        self.figures["wake_new"] = Figure(f"one-step, {rows} new runs started at once", new, "workflows/s")
        self.figures["wake_new_gap"] = Figure("  longest time no run started", new_gap, "s")
        self.figures["wake_timers"] = Figure(
            f"one-step, {rows} timers ended at once", woken, "workflows/s",
            self.figures["wake_new"].metric, woken / new, (">=", 1.0),
        )  # fmt: skip
        self.figures["wake_timers_gap"] = Figure("  longest time no run started", woken_gap, "s")

    def _fan_out(self, workers: Workers) -> None:
        """One parent of ``fan_out`` one-step children, then as many independent
        one-step runs, on the "empty" database's workers, ``repeat`` times in
        alternating order: the seconds of each, their ratio (paired by round),
        the parent's wake-ups, and how much the workers' peak memory grew.

        The workers' peak while the parent ran is mostly not the parent's: the
        same threads run its children meanwhile. So the workers first run N
        independent runs, unmeasured (the memory that running N runs takes is
        then theirs already, as in any worker that has run a while), each
        round's peak is read from the round's start (``restart_peaks``), and
        the parent's own growth is its round's less the independent runs'."""
        count, rounds = self.options.fan_out, self.options.repeat
        fan_out.prepare(self.empty)
        peak_before = max(workers.peak_rss_mb(), default=0.0)
        fan_out.reset(self.empty)
        fan_out.independent_runs(self.empty, count)
        lifetime_peak = max(workers.peak_rss_mb(), default=0.0)
        parent: list[float] = []
        independent: list[float] = []
        wake_ups: list[float] = []
        parent_growth: list[float] = []  # the peak only rises: a parent run after the independent ones reads less
        grown_in_round: dict[str, list[float]] = {"parent": [], "independent": []}  # from the round's start
        for round_number in range(rounds):
            order = ("parent", "independent") if round_number % 2 == 0 else ("independent", "parent")
            for measured in order:
                fan_out.reset(self.empty)
                lifetime_peak = max([lifetime_peak, *workers.restart_peaks()])
                start = max(workers.rss_mb(), default=0.0)
                if measured == "parent":
                    seconds, woken = fan_out.one_parent(self.empty, count)
                    parent.append(seconds)
                    wake_ups.append(woken)
                    self.say(f"  one parent of {count} children: {seconds:.2f}s, woken {woken} time(s)")
                else:
                    independent.append(fan_out.independent_runs(self.empty, count))
                    self.say(f"  {count} independent one-step runs: {independent[-1]:.2f}s")
                peak = max(workers.peak_rss_mb(), default=0.0)
                grown_in_round[measured].append(peak - start)
                if measured == "parent":
                    parent_growth.append(max(peak - lifetime_peak, 0.0))
                lifetime_peak = max(lifetime_peak, peak)
        growth = lifetime_peak - peak_before
        paired = zip(grown_in_round["parent"], grown_in_round["independent"], strict=True)
        own = [(grown - alone) * 1024 / count for grown, alone in paired]
        self.say(
            "  peak RSS growth from each round's start (MB): parent "
            + ", ".join(f"{grown:.1f}" for grown in grown_in_round["parent"])
            + "; independent "
            + ", ".join(f"{grown:.1f}" for grown in grown_in_round["independent"])
        )
        one = f"one parent of {count} one-step children (ctx.start_children, ctx.wait_for)"
        self.figures["fan_out_independent"] = Figure(
            f"{count} independent one-step runs (start_workflows)",
            statistics.median(independent),
            "s",
            samples=independent,
        )
        self.figures["fan_out_parent"] = Figure(
            one,
            statistics.median(parent),
            "s",
            self.figures["fan_out_independent"].metric,
            statistics.median(p / i for p, i in zip(parent, independent, strict=True)),
            ("<=", 2.0),
            parent,
        )
        self.figures["fan_out_wake_ups"] = Figure(
            "  wake-ups of the parent while it waited", max(wake_ups), "times", target=("<=", 3), samples=wake_ups
        )
        self.figures["fan_out_rss"] = Figure(
            "  growth of the workers' peak RSS during the fan-out", growth, "MB", samples=[growth]
        )
        self.figures["fan_out_rss_per_child"] = Figure(
            "  growth of the peak RSS while the parent ran, a child",
            max(parent_growth) * 1024 / count,
            "KB",
            samples=[grown * 1024 / count for grown in parent_growth],
        )
        self.figures["fan_out_rss_parent_own"] = Figure(
            "  the parent's own: its round's peak RSS growth less the independent runs', a child",
            statistics.median(own),
            "KB",
            samples=own,
        )

    def _checkpoint(self) -> None:
        """A CHECKPOINT before the rounds, so that the one the pre-load's WAL
        calls for does not write beside the first of them (skipped where the
        database user may not: PostgreSQL 15's ``pg_checkpoint`` role, or a superuser)."""
        try:
            self.empty.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            self.say("no CHECKPOINT before the rounds (the database user may not)")

    def _limit(self, concurrency: int | None = None, key_concurrency: int | None = None) -> None:
        """Set the "limited" queue's limits, and wait until its workers have read
        their share of them again before any drain: an idle thread asks once a
        poll interval, and reads them if it is a poll interval since they were
        read, so two intervals after the change at the most."""
        self.limited.execute(SET_LIMITS, {"concurrency": concurrency, "key_concurrency": key_concurrency})
        time.sleep(2.2 * conf.POLL_INTERVAL)

    def _cpu_figures(self, key: str, samples: dict[str, list[float]]) -> None:
        """The CPU a workflow of drain ``key``, beside its rate: the worker processes', PostgreSQL's."""
        for side, label in (("workers", "worker processes"), ("server", "PostgreSQL backends")):
            values = samples.get(f"{key}_cpu_{side}")
            metric = f"  CPU a workflow ({key}), {label}"
            if values:
                self.figures[f"{key}_cpu_{side}"] = Figure(metric, statistics.median(values), "µs", samples=values)
            elif side == "server" and f"{key}_cpu_workers" in samples:
                self.figures[f"{key}_cpu_{side}"] = Figure(f"{metric}: n/a, not on this machine", 0.0, "µs")

    def _drain_limited(
        self, measured: str, concurrency: int | None = None, key_concurrency: int | None = None
    ) -> float:
        """A one-step drain on the "limited" database under these limits (with
        ``key_concurrency``, the workflows spread over ``KEYS`` keys in turn).
        Its workers read the limits in each claim, their shares once a poll interval."""
        self._limit(concurrency, key_concurrency)
        keys = [f"key-{n % KEYS}" for n in range(self.options.workflows)] if key_concurrency else None
        return self._drain(self.limited, self.options.workflows, 1, keys=keys, measured=measured)

    def _drain(
        self,
        database: ScratchDatabase,
        count: int,
        steps: int,
        enqueue_key: str | None = None,
        keys: list[str] | None = None,
        measured: str | None = None,
    ) -> float:
        """Bulk-start ``count`` workflows while the workers idle, and return the
        steady rate at which they finish them (see ``limit.STEADY_RATE``). With
        ``measured``, also the CPU a workflow of the workers and of PostgreSQL
        (from the enqueue's commit, when the workers start, to the last run)."""
        if database is not self.loaded and database is not self.waiting:
            database.reset()
        if database is self.waiting:  # the previous drain's dead index entries (autovacuum's work), as reset() drops
            database.execute("VACUUM workflows")
        backends = server_backends(database.conninfo())
        with database.queue_alias():
            started = time.perf_counter()
            data = {"steps": steps, "progress": True} if self.options.progress else {"steps": steps}
            workflows = start_workflows(WORKFLOW_TYPE, [data] * count, concurrency_keys=keys)
            enqueue_seconds = time.perf_counter() - started
            meter = CpuMeter(self.worker_pids.get(database.label, []), backends)
        if enqueue_key:
            self.samples.setdefault(enqueue_key, []).append(count / enqueue_seconds)
        ids = [workflow.pk for workflow in workflows]
        database.wait_until_idle(timeout=60 + count * steps / 50)
        failed = database.scalar("SELECT count(*) FROM workflows WHERE id = ANY(%s) AND status <> 'completed'", [ids])
        done, rate = database.one(limit.STEADY_RATE.format(table="workflows", where="id = ANY(%s)"), [ids])
        if failed or done != count or not rate:
            raise RuntimeError(f"{count - failed} of {count} benchmark workflows completed; see {self.log_dir}")
        cpu = ""
        if measured is not None:
            workers_cpu, server_cpu = meter.used()
            self.samples.setdefault(f"{measured}_cpu_workers", []).append(workers_cpu / count * 1e6)
            cpu = f", CPU a workflow {workers_cpu / count * 1e6:,.0f} µs in the workers"
            if server_cpu is not None:
                self.samples.setdefault(f"{measured}_cpu_server", []).append(server_cpu / count * 1e6)
                cpu += f", {server_cpu / count * 1e6:,.0f} µs in PostgreSQL"
        self.say(f"  {count} x {steps}-step on {database.label}: {rate:,.0f}/s{cpu}")
        return rate

    def _latency(self) -> None:
        samples = self.options.latency_samples
        self.empty.reset()
        ids = []
        with self.empty.queue_alias():
            for n in range(samples):
                ids.append(start_workflow(WORKFLOW_TYPE, {"steps": 1, "n": n}).pk)
                time.sleep(limit.idle_between_enqueues(n))
        self.empty.wait_until_idle(timeout=60)
        with psycopg.connect(self.empty.conninfo()) as conn:
            latencies = [
                row[0]
                for row in conn.execute(
                    "SELECT extract(epoch FROM started_at - created_at)::float8 * 1000 "
                    "FROM workflows WHERE id = ANY(%s)",
                    [ids],
                )
            ]
        latencies.sort()
        p50 = statistics.median(latencies)
        p99 = _percentile(latencies, 0.99)
        idle = f"{self.options.processes} x {self.options.threads} idle threads"
        self.figures["latency_p50"] = Figure(f"enqueue-to-start p50 ({idle})", p50, "ms", target=("<=", 1.5))
        self.figures["latency_p99"] = Figure("enqueue-to-start p99", p99, "ms", target=("<=", 4.0), samples=latencies)
        floor = sorted(limit.wake_latencies(self.empty.conninfo(), samples=samples, processes=self.options.processes))
        self.figures["latency_floor_p50"] = Figure(
            f"limit: psycopg insert-notify-claim p50 (a listener in each of {self.options.processes} processes)",
            statistics.median(floor),
            "ms",
        )
        self.figures["latency_floor_p99"] = Figure(
            "limit: psycopg insert-notify-claim p99", _percentile(floor, 0.99), "ms", samples=floor
        )

    def _result_waits(self) -> None:
        delays = results.wait_delays(self.empty, self.options.latency_samples)
        p50, p99 = statistics.median(delays), _percentile(delays, 0.99)
        callers = f"{len(delays)} aget_result callers in one process"
        self.figures["result_p50"] = Figure(f"completion-to-result p50 ({callers})", p50, "ms", target=("<=", 100))
        self.figures["result_p99"] = Figure("completion-to-result p99", p99, "ms", samples=delays)

    def _hot_updates(self) -> None:
        """Share of row updates that were HOT (no index touched), over the whole run."""
        time.sleep(1)  # the backends' statistics reach pg_stat_user_tables within a second
        rows = self.empty.all(
            "SELECT relname, 100.0 * n_tup_hot_upd / nullif(n_tup_upd, 0) FROM pg_stat_user_tables "
            "WHERE relname IN ('workflows', 'workflow_steps') ORDER BY relname DESC"
        )
        for table, share in rows:
            self.figures[f"hot_{table}"] = Figure(f"HOT updates of {table} rows", float(share or 0), "%")

    def _rss_at_concurrency(self) -> None:
        concurrency = self.options.rss_concurrency
        with Workers(self.empty, 1, concurrency, self.options.worker_args, self.log_dir, "rss") as workers:
            self._drain(self.empty, self.options.workflows, self.options.steps)
            peak = workers.peak_rss_mb()[0]
        self.figures["rss"] = Figure(f"peak RSS, runworkers --concurrency {concurrency}", peak, "MB", target=("<=", 80))


def _paired_ratio(values: list[float], bases: list[float]) -> float:
    """The median of each round's ratio of ``values`` to ``bases``."""
    return statistics.median(value / base for value, base in zip(values, bases, strict=True))


def _percentile(ordered: list[float], fraction: float) -> float:
    """The value at ``fraction`` of the sorted ``ordered`` (the nearest rank)."""
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]
