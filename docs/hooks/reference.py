"""The reference pages' generated parts, and the MkDocs hook that puts them in.

A page asks for a part with a marker line such as ``<!-- reference:api -->``.
The parts are read from the code itself (``orchestration.__all__``, the
management commands' parsers, the admin's actions, ``conf.DEFAULTS``), so a
name added there reaches the site without anyone editing a page; the build
(``mkdocs build --strict``) fails when a setting is missing from its table.
The functions need Django set up; the tests call them as they are.
"""

from __future__ import annotations

import argparse
import logging
import os
import pkgutil
import re
from collections.abc import Callable
from typing import Any

log = logging.getLogger("mkdocs.plugins.orchestration_reference")

MARKER = re.compile(r"^<!-- reference:([a-z-]+) -->$", re.MULTILINE)


def public_objects() -> dict[str, Any]:
    """Every name of ``orchestration.__all__`` with the object it names."""
    import orchestration

    return {name: getattr(orchestration, name) for name in orchestration.__all__}


def _directive(name: str, obj: Any) -> str:
    # The object's own module, where its docstring and signature live: the
    # package exports most names lazily, which static analysis cannot follow.
    return f"::: {obj.__module__}.{obj.__qualname__}\n"


def _is_error(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseException)


def api_part() -> str:
    """The functions and classes of the public API, each from its docstring."""
    return "\n".join(_directive(name, obj) for name, obj in public_objects().items() if not _is_error(obj))


def errors_part() -> str:
    """The public exceptions, each from its docstring (its default message)."""
    return "\n".join(_directive(name, obj) for name, obj in public_objects().items() if _is_error(obj))


def command_names() -> list[str]:
    from orchestration.management import commands

    return [info.name for info in pkgutil.iter_modules(commands.__path__) if not info.name.startswith("_")]


def commands_part() -> str:
    """Each management command's ``--help``, as ``manage.py`` prints it."""
    from unittest import mock

    from django.core.management import load_command_class

    # argparse wraps to the terminal's width: one width, whoever builds the site.
    with mock.patch.dict(os.environ, {"COLUMNS": "100"}):
        return "\n".join(_command_help(load_command_class("orchestration", name), name) for name in command_names())


def _command_help(command: Any, name: str) -> str:
    parser = command.create_parser("manage.py", name)
    parts = [f"## `{name}`\n", f"```text\n{parser.format_help().rstrip()}\n```\n"]
    # A command with verbs (workflows, workflow_queues): each verb's own --help.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for verb, subparser in action.choices.items():
                parts.append(f"### `{name} {verb}`\n\n```text\n{subparser.format_help().rstrip()}\n```\n")
    return "\n".join(parts)


def admin_actions_part() -> str:
    """The admin's bulk actions: their names, labels and the permissions they need."""
    from django.contrib import admin

    rows = ["| model | action | label | needs |", "| --- | --- | --- | --- |"]
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label != "orchestration":
            continue
        for action in model_admin.actions or []:
            needs = ", ".join(f"`{_permission(model, p)}`" for p in getattr(action, "allowed_permissions", ()))
            label = getattr(action, "short_description", action.__name__)
            rows.append(f"| {model._meta.verbose_name} | `{action.__name__}` | {label} | {needs} |")
    return "\n".join(rows) + "\n"


def _permission(model: Any, name: str) -> str:
    # The admin's has_<name>_permission: retry and cancel are the model's own
    # permissions (retry_workflow, cancel_workflow), change the standard one.
    codename = f"{name}_{model._meta.model_name}"
    return f"{model._meta.app_label}.{codename}"


def undocumented_settings(page: str) -> list[str]:
    """The settings of ``conf.DEFAULTS`` with no row in the settings page's table."""
    from orchestration.conf import DEFAULTS

    return [name for name in DEFAULTS if f"| `{name}` |" not in page]


PARTS: dict[str, Callable[[], str]] = {
    "api": api_part,
    "errors": errors_part,
    "commands": commands_part,
    "admin-actions": admin_actions_part,
}


# -- the MkDocs hook ---------------------------------------------------------


def _setup_django() -> None:
    import django
    from django.conf import settings

    if not settings.configured:
        # Enough to load the app, its admin and its commands' parsers; no
        # connection is ever opened.
        settings.configure(
            INSTALLED_APPS=[
                "django.contrib.admin",
                "django.contrib.auth",
                "django.contrib.contenttypes",
                "django.contrib.sessions",
                "django.contrib.messages",
                "orchestration",
            ],
            DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "docs"}},
            USE_TZ=True,
        )
    django.setup()


def on_config(config: Any) -> Any:
    _setup_django()
    return config


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri == "reference/settings.md":
        for name in undocumented_settings(markdown):
            log.warning("reference/settings.md: the setting %s has no row in the table", name)

    def part(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in PARTS:
            log.warning("%s: no reference part named %r", page.file.src_uri, name)
            return ""
        return PARTS[name]()

    return MARKER.sub(part, markdown)
