"""A real ``runworkers`` process's Prometheus metrics: served on its own port
(``--metrics-port``), or shared through ``PROMETHEUS_MULTIPROC_DIR`` with the
web process's ``metrics_view`` (the documented multiprocess setup)."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestration import start_workflow
from orchestration.models import Workflow
from tests.support import METRICS_AUTH, run_burst, start_workers, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def samples_of(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


THREE_STEPS = (("queue", "default"), ("workflow_type", "three_steps"))


def test_metrics_port__serves_the_workers_own_counters(workers):
    from tests.acceptance.test_runworkers import wait_for

    port = free_port()
    for n in range(3):
        start_workflow("three_steps", {"n": n})
    process = start_workers("--concurrency", "2", "--metrics-port", str(port))
    workers.append(process)

    def completed() -> float:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                text = response.read().decode()
        except OSError:
            return -1
        return samples_of(text).get(("orchestration_workflows_completed_total", THREE_STEPS), 0)

    assert wait_for(lambda: completed() == 3, timeout=30)


def test_multiprocess_dir__the_views_metrics_count_what_worker_processes_ran(client, tmp_path, monkeypatch):
    for n in range(4):
        start_workflow("three_steps", {"n": n})
    result = run_burst(env=worker_env(PROMETHEUS_MULTIPROC_DIR=str(tmp_path)))
    assert result.returncode == 0, result.stderr
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    samples = samples_of(client.get("/metrics/", **METRICS_AUTH).content.decode())
    assert samples[("orchestration_workflows_completed_total", THREE_STEPS)] == 4
    assert samples[("orchestration_workflows_started_total", THREE_STEPS)] == 4
    steps = (*THREE_STEPS, ("outcome", "completed"))
    assert samples[("orchestration_step_duration_seconds_count", tuple(sorted(steps)))] == 12


def counting_in_a_burst(env: dict[str, str]) -> bool:
    """Whether a ``runworkers --burst`` process run in ``env`` counts what it runs."""
    run = start_workflow("reports_counting")
    result = run_burst(env=env)
    assert result.returncode == 0, result.stderr
    return Workflow.objects.get(pk=run.pk).output_data["counting"]


def test_runworkers_neither_serving_nor_sharing_its_counters__keeps_none():
    env = worker_env()
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    assert counting_in_a_burst(env) is False


def test_runworkers_sharing_its_counters_through_the_multiprocess_dir__keeps_them(tmp_path):
    assert counting_in_a_burst(worker_env(PROMETHEUS_MULTIPROC_DIR=str(tmp_path))) is True


def listening_address(port: int) -> str | None:
    """The IPv4 address a socket of this machine listens on at ``port``, from /proc/net/tcp."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:
            return socket.inet_ntoa(bytes.fromhex(address)[::-1])
    return None


def test_metrics_port__listens_on_this_machine_only_by_default(workers):
    from tests.acceptance.test_runworkers import wait_for

    port = free_port()
    workers.append(start_workers("--concurrency", "1", "--metrics-port", str(port)))
    assert wait_for(lambda: listening_address(port) is not None, timeout=30)
    assert listening_address(port) == "127.0.0.1"


def test_metrics_address__sets_where_the_metrics_port_listens(workers):
    from tests.acceptance.test_runworkers import wait_for

    port = free_port()
    workers.append(start_workers("--concurrency", "1", "--metrics-port", str(port), "--metrics-address", "0.0.0.0"))
    assert wait_for(lambda: listening_address(port) is not None, timeout=30)
    assert listening_address(port) == "0.0.0.0"
