"""``manage.py benchmark`` runs end to end (tiny numbers: what is checked is
that every figure comes out and nothing is left behind, not the figures)."""

from __future__ import annotations

import json

import pytest

from tests.support import run_benchmark, scratch_databases

pytestmark = pytest.mark.django_db(transaction=True)

SMALL = [
    "--workflows", "60", "--steps", "2", "--processes", "1", "--threads", "2", "--finished-rows", "2000",
    "--backlog", "100", "--latency-samples", "10", "--single-enqueues", "10", "--repeat", "1",
    "--rss-concurrency", "2", "--fan-out", "20",
]  # fmt: skip


def test_benchmark__prints_every_figure_as_a_table_and_json_lines_and_drops_its_databases():
    result, worked_in = run_benchmark("benchmark", *SMALL)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    configuration, figures = lines[0]["configuration"], {line["metric"]: line for line in lines[1:]}
    assert configuration["workflows"] == 60 and configuration["server_version"]
    for metric in (
        "limit: psycopg loop, 1 transaction a job (1 processes x 2 threads)",
        "limit: psycopg loop, 3 transactions a job",
        "enqueue, start_workflow() one at a time",
        "  start_workflow() p99",
        "  start_workflow() p99/p50 over the INSERT's p99/p50",
        "enqueue, astart_workflow() one at a time",
        "  astart_workflow() p99",
        "limit: psycopg single-row INSERT loop, one connection",
        "enqueue, start_workflows() of 100",
        "one-step workflows, runworkers",
        "2-step workflows, runworkers",
        "one-step, draining a 100 backlog",
        "one-step, 2000 finished rows in the table",
        "enqueue-to-start p50 (1 x 2 idle threads)",
        "enqueue-to-start p99",
        "limit: psycopg insert-notify-claim p50 (a listener in each of 1 processes)",
        "limit: psycopg insert-notify-claim p99",
        "completion-to-result p50 (10 aget_result callers in one process)",
        "completion-to-result p99",
        "peak RSS, runworkers --concurrency 2",
        "one-step, queue concurrency 2 (= threads)",
        "one-step, 100 keys of key_concurrency 1",
        "one-step, queue concurrency 10000 (not binding)",
        "one-step, flow control's workers, no limit",
    ):
        assert figures[metric]["value"] > 0, metric
    assert figures["one-step workflows, runworkers"]["ratio"] > 0
    single = figures["enqueue, start_workflow() one at a time"]
    assert single["ratio_of"] == "limit: psycopg single-row INSERT loop, one connection" and single["ratio"] > 0
    fan_out = figures["one parent of 20 one-step children (ctx.start_children, ctx.wait_for)"]
    assert fan_out["ratio_of"] == "20 independent one-step runs (start_workflows)" and fan_out["ratio"] > 0
    assert fan_out["value"] > 0 and figures[fan_out["ratio_of"]]["value"] > 0
    # 0 if its children had all finished by the time it waited (the figure is not checked, only that it comes out)
    assert figures["  wake-ups of the parent while it waited"]["value"] >= 0
    for metric in (
        "  growth of the workers' peak RSS during the fan-out",
        "  growth of the peak RSS while the parent ran, a child",
        "  the parent's own: its round's peak RSS growth less the independent runs', a child",
    ):
        assert metric in figures, metric
    not_binding = figures["one-step, queue concurrency 10000 (not binding)"]
    assert not_binding["ratio_of"] == "one-step, flow control's workers, no limit" and not_binding["ratio"] > 0
    # CPU a workflow beside each drain's rate: the workers' and, the server being on this machine, PostgreSQL's
    # (in clock ticks: a tiny drain may round to none).
    drains = (
        "one_step", "multi_step", "loaded", "backlog", "no_limit", "limit_not_binding", "concurrency_limit", "key_limit"
    )  # fmt: skip
    for drain in drains:
        for side in ("worker processes", "PostgreSQL backends"):
            assert figures[f"  CPU a workflow ({drain}), {side}"]["value"] >= 0, (drain, side)
    assert "measurement" in result.stdout and "Index Scan using idx_workflows_due" in result.stdout
    assert len(worked_in) == 3 and not worked_in & scratch_databases(), "its scratch databases are dropped"


@pytest.mark.parametrize("producers", [1, 2])
def test_benchmark_steady__prints_each_rates_figures_measured_on_a_table_in_use_and_drops_its_database(producers):
    result, worked_in = run_benchmark(
        "benchmark", "--steady", "40", "--steady-seconds", "2", "--steady-producers", str(producers),
        "--processes", "1", "--threads", "2", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    figures = {line["metric"]: line for line in map(json.loads, result.stdout.splitlines()) if "metric" in line}
    label = "steady 40/s (1 x 2 threads, 2s" + (", 2 producers)" if producers == 2 else ")")
    started = figures[f"{label}: started"]["value"]
    assert 0 < started <= 44
    # its own runs only: the 10,000 finished runs it starts from are not counted as completed
    assert 0 < figures[f"{label}: completed"]["value"] <= 2 * 44
    for figure in (
        "workers' CPU a run",
        "start latency p50",
        "start latency p99",
        "limit: a bare INSERT's own time p50",
    ):
        assert figures[f"{label}: {figure}"]["value"] > 0, figure
    assert "steady: highest rate sustained with p99 < 10 ms" in figures
    assert len(worked_in) == 1 and not worked_in & scratch_databases(), "its scratch database is dropped"
