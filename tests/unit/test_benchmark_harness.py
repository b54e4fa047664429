"""The benchmark ships with the app without showing up in a project: its
workflow type is registered by the command's run and its worker processes, not
by installing orchestration or importing the harness."""

from __future__ import annotations

import importlib
import os
import time

import pytest

from orchestration.benchmark.cpu import CpuMeter, cpu_seconds, server_backends
from orchestration.benchmark.workflows import WORKFLOW_TYPE
from orchestration.registry import registered_workflows
from tests.support import other_connection


def test_benchmark__importing_the_command_and_harness_registers_no_workflow_type():
    for module in ("orchestration.management.commands.benchmark", "orchestration.benchmark.worker_process"):
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
    with other_connection() as connection:
        conninfo = connection.info.dsn
    assert all(server_backends(conninfo) for _ in range(200))
