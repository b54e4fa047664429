"""Pure parts of the Tasks backend: its own system checks."""

from __future__ import annotations

import pytest

pytest.importorskip("django.tasks")

from orchestration.tasks import WorkflowBackend


@pytest.mark.parametrize(
    ("params", "expected_ids"),
    [
        ({}, []),
        ({"QUEUES": ["default", "emails"], "OPTIONS": {"MAX_RETRIES": 0}}, []),
        ({"QUEUES": []}, []),
        ({"QUEUES": ["a,b", ""]}, ["orchestration.E011", "orchestration.E011"]),
        ({"OPTIONS": {"MAX_RETRIES": -1}}, ["orchestration.E012"]),
        ({"OPTIONS": {"MAX_RETRIES": "3"}}, ["orchestration.E012"]),
        ({"OPTIONS": {"MAX_RETRIES": True}}, ["orchestration.E012"]),
        ({"OPTIONS": {"RETRIES": 3}}, ["orchestration.W010"]),
    ],
)
def test_backend_check__reports_invalid_queues_and_options(params, expected_ids):
    backend = WorkflowBackend("x", {"BACKEND": "orchestration.tasks.WorkflowBackend", **params})
    assert sorted(problem.id for problem in backend.check()) == expected_ids


def test_known_queues__include_the_queues_of_every_tasks_backend_of_ours():
    from django.test import override_settings

    from orchestration.registry import known_queues

    assert "emails" in known_queues()  # tests/settings.py: TASKS["default"]["QUEUES"]
    tasks_setting = {
        "default": {"BACKEND": "orchestration.tasks.WorkflowBackend", "QUEUES": ["reports"]},
        "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend", "QUEUES": ["elsewhere"]},
    }
    with override_settings(TASKS=tasks_setting):
        assert "reports" in known_queues() and "elsewhere" not in known_queues()
