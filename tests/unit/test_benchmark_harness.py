"""The benchmark ships with the app without showing up in a project: its
workflow type is registered by the command's run and its worker processes, not
by installing orchestration or importing the harness."""

from __future__ import annotations

import importlib

from orchestration.benchmark.workflows import WORKFLOW_TYPE
from orchestration.registry import registered_workflows


def test_benchmark__importing_the_command_and_harness_registers_no_workflow_type():
    for module in ("orchestration.management.commands.benchmark", "orchestration.benchmark.worker_process"):
        importlib.import_module(module)
    assert WORKFLOW_TYPE not in registered_workflows()
