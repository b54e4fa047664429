"""On Django < 6.0 (no django.tasks) the Tasks backend is simply unavailable."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("django.tasks") is not None, reason="this Django has django.tasks"
)


def test_importing_the_backend__raises_a_clear_import_error():
    with pytest.raises(ImportError, match=r"needs Django 6\.0 or newer; this is Django 5\."):
        importlib.import_module("orchestration.tasks")


def test_the_reserved_task_workflow_type__is_not_registered():
    from orchestration.registry import registered_workflows

    assert "django.tasks" not in registered_workflows()
