"""The fault-injection suite: one test for each side road where a workflow
could wait, loop, run forever or run a completed step again (``pytest -m
fault_injection``). Every test here carries the marker."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/fault_injection/" in str(item.path):
            item.add_marker(pytest.mark.fault_injection)
