"""Text that user code and remote systems put in errors and step names reaches
the log and the terminal bounded (as stored) and with its control characters
escaped: no escape sequence runs, no newline forges a log line."""

from __future__ import annotations

import io
import logging

import pytest
from django.core.management import call_command

from orchestration import start_workflow
from orchestration.models import Workflow, WorkflowStatus
from orchestration.validation import ERROR_MESSAGE_MAX_LENGTH
from tests.support import drain

pytestmark = pytest.mark.django_db

CONTROLS = [chr(code) for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)]]


def failed_loudly(size: int, caplog: pytest.LogCaptureFixture) -> Workflow:
    workflow = start_workflow("loud_failure", {"size": size})
    with caplog.at_level(logging.INFO, logger="orchestration"):
        drain()
    workflow.refresh_from_db()
    assert workflow.status == WorkflowStatus.FAILED
    return workflow


def test_failure_log_lines__carry_the_cut_message_that_is_stored(caplog):
    workflow = failed_loudly(1_000_000, caplog)
    lines = [record.getMessage() for record in caplog.records if "failed" in record.getMessage()]
    assert len(lines) == 6  # the step's and the attempt's line, for each of 3 attempts
    assert all(len(line) < ERROR_MESSAGE_MAX_LENGTH + 300 for line in lines), [len(line) for line in lines]
    assert "characters cut" in lines[-1]
    assert lines[-1].endswith(workflow.error_message.encode("unicode_escape").decode()[-200:])


def test_log_lines__escape_control_characters_of_errors_and_step_names(caplog):
    failed_loudly(10, caplog)
    lines = [record.getMessage() for record in caplog.records]
    assert any("\\x1b]0;owned\\x07" in line and "\\nWARNING orchestration: workflow 0" in line for line in lines)
    assert any('"loud\\x1b[2J step"' in line for line in lines)
    assert not [line for line in lines if any(control in line for control in CONTROLS)]


def test_workflows_show__escapes_control_characters_and_keeps_the_tracebacks_lines(caplog):
    workflow = failed_loudly(10, caplog)
    out = io.StringIO()
    call_command("workflows", "show", str(workflow.pk), stdout=out)
    shown = out.getvalue()
    assert not [control for control in CONTROLS if control != "\n" and control in shown]
    assert "\\x1b]0;owned\\x07\\x1b[2J\\nWARNING orchestration: workflow 0 (fake)" in shown
    assert "loud\\x1b[2J step" in shown
    assert "\nWARNING" not in shown  # no line of its own, in the traceback either
    assert "\n  | Traceback (most recent call last):\n  |   File " in shown
