"""The package uses logging, psycopg and OpenTelemetry through their public
APIs only: a private attribute (``logging._startTime``, ``trace._TRACER_PROVIDER``)
can change in any release of the library, and the package would break with it."""

from __future__ import annotations

import ast
from pathlib import Path

import orchestration

LIBRARIES = ("logging", "psycopg", "opentelemetry")
PACKAGE = Path(orchestration.__file__).parent


def private_reads(source: str) -> list[str]:
    """Each read of a private name (one underscore first) of ``LIBRARIES`` in
    ``source``: imported by name, or an attribute of a name bound to them."""
    tree = ast.parse(source)
    bound: set[str] = set()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARIES:
                    bound.add(alias.asname or alias.name.split(".")[0])
                    found += [alias.name for part in alias.name.split(".") if _private(part)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in LIBRARIES:
            for alias in node.names:
                bound.add(alias.asname or alias.name)
                if _private(alias.name) or any(_private(part) for part in node.module.split(".")):
                    found.append(f"{node.module}.{alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(ast.unparse(node))
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_private_reads__finds_a_private_attribute_or_module_of_each_library():
    source = """
import logging
import psycopg.pq as pq
from opentelemetry import trace
from psycopg._encodings import pg2pyenc
logging._startTime, pq._private.x, trace._TRACER_PROVIDER, logging.getLogger, trace.__name__
"""
    assert sorted(private_reads(source)) == [
        "logging._startTime",
        "pq._private",
        "psycopg._encodings.pg2pyenc",
        "trace._TRACER_PROVIDER",
    ]


def test_the_package_reads_no_private_attribute_of_logging_psycopg_or_opentelemetry():
    found = {
        str(path.relative_to(PACKAGE)): reads
        for path in sorted(PACKAGE.rglob("*.py"))
        if (reads := private_reads(path.read_text()))
    }
    assert found == {}
