"""With ``--json``, a command's error is a JSON object too.

A script that reads a command's ``--json`` output parses stdout; an error
said only as Django's ``CommandError: ...`` line on stderr would leave it
nothing to parse. So the error is also written to stdout as
``{"error": ..., "exit_status": ...}``, and the command still ends as
``CommandError`` does (the line on stderr, the exit status of
docs/reference/commands.md's table).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError


class JsonErrors(BaseCommand):
    """A command whose ``CommandError`` under ``--json`` is written to stdout as a JSON object."""

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except CommandError as exc:
            if options.get("json") and not getattr(exc, "reported", False):
                self.stdout.write(json.dumps({"error": str(exc), "exit_status": exc.returncode}))
            raise


def already_reported(exc: CommandError) -> CommandError:
    """``exc``, for an error whose JSON the command has already written (a result per id)."""
    exc.reported = True  # type: ignore[attr-defined]
    return exc
