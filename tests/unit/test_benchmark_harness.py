"""The benchmark is the repository's (project/benchmark, its commands in
project/demo), not the package's: its workflow type is registered by the
command's run and its worker processes, not by importing the harness."""

from __future__ import annotations

import importlib
import os
import threading
import time
import uuid

import pytest

from orchestration.registry import registered_workflows
from project.benchmark import limit
from project.benchmark.cpu import CpuMeter, cpu_seconds, server_backends
from project.benchmark.workflows import WORKFLOW_TYPE
from tests.support import database_conninfo, other_connection


def test_benchmark__importing_the_command_and_harness_registers_no_workflow_type():
    for module in ("project.demo.management.commands.benchmark", "project.benchmark.worker_process"):
        importlib.import_module(module)
    assert WORKFLOW_TYPE not in registered_workflows()


def test_cpu_meter__counts_the_cpu_a_process_spends__and_leaves_out_one_not_visible_here():
    meter = CpuMeter([os.getpid(), 2**22 + 1], backends=None)
    until = time.process_time() + 0.1
    while time.process_time() < until:
        pass
    workers, server = meter.used()
    assert 0.05 <= workers <= 1.0 and server is None
    assert cpu_seconds(2**22 + 1) is None


@pytest.mark.django_db
def test_server_backends__of_a_server_on_this_machine__are_found_every_time():
    assert all(server_backends(database_conninfo()) for _ in range(200))


@pytest.mark.django_db(transaction=True)
def test_wake_up_floor__a_listener_that_cannot_connect__fails_the_measurement_instead_of_waiting_for_ever():
    # Its one connection is the measurement's own; a role is the server's: named for this run alone.
    role = f"orchestration_test_one_connection_{uuid.uuid4().hex[:8]}"
    with other_connection() as admin:
        admin.execute(f"DROP ROLE IF EXISTS {role}")
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'one-connection' CONNECTION LIMIT 1")
        admin.execute(f"GRANT CREATE ON SCHEMA public TO {role}")
    conninfo = database_conninfo(user=role, password="one-connection")
    raised: list[BaseException] = []

    def measure() -> None:
        try:
            limit.wake_latencies(conninfo, samples=3, processes=1)
        except BaseException as exc:
            raised.append(exc)

    measuring = threading.Thread(target=measure, daemon=True)
    measuring.start()
    measuring.join(timeout=60)
    try:
        assert not measuring.is_alive(), "still waiting for a listener that exited"
        assert len(raised) == 1 and "exited (code 1) before it started" in str(raised[0])
    finally:
        with other_connection() as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
