"""The ``run_workflows`` fixture, registered by the package's ``pytest11``
entry point: installing ``orchestration`` is enough. Where the entry point is
not loaded (``-p no:orchestration``, ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``),
``pytest_plugins = ["orchestration.testing.pytest_plugin"]`` in a
``conftest.py`` does the same."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def run_workflows(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``orchestration.testing.run_workflows``, with database access: the
    test's ``transactional_db`` or ``django_db`` mark if it has one, else
    pytest-django's ``db`` (the test's transaction, rolled back after it)."""
    if "transactional_db" not in request.fixturenames and request.node.get_closest_marker("django_db") is None:
        request.getfixturevalue("db")
    from orchestration.testing import run_workflows as run

    return run
