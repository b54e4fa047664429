"""The site's reference keeps up with the code: every public name, setting,
command and admin action is on its page, and every Python sample parses (docs/hooks/reference.py builds the
generated parts; `make docs` renders them)."""

import ast
import re
from pathlib import Path

import orchestration
from docs.hooks import reference
from orchestration.conf import DEFAULTS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_reference__every_name_of_the_public_api_has_an_entry_generated_from_its_docstring():
    entries = reference.api_part() + reference.errors_part()
    for name in orchestration.__all__:
        obj = getattr(orchestration, name)
        assert f"::: {obj.__module__}.{obj.__qualname__}\n" in entries, f"{name} is missing from the reference"
        assert (obj.__doc__ or "").strip(), f"{name} has no docstring for the reference to show"


def test_reference__the_pages_ask_for_their_generated_parts():
    for page, part in [("api", "api"), ("errors", "errors"), ("commands", "commands"), ("admin", "admin-actions")]:
        assert f"<!-- reference:{part} -->" in (DOCS / "reference" / f"{page}.md").read_text()


def test_reference__every_setting_has_a_row_in_the_settings_page():
    page = (DOCS / "reference" / "settings.md").read_text()
    assert reference.undocumented_settings(page) == []
    assert reference.undocumented_settings("") == list(DEFAULTS)


def test_reference__every_management_command_and_each_verb_has_its_help():
    commands = reference.commands_part()
    for name in reference.command_names():
        assert f"## `{name}`" in commands
    assert "### `workflows retry`" in commands and "usage: manage.py runworkers" in commands


def test_reference__every_admin_action_is_listed_with_its_permission():
    actions = reference.admin_actions_part()
    for name, permission in [
        ("retry_workflows", "orchestration.retry_workflow"),
        ("restart_workflows", "orchestration.retry_workflow"),
        ("cancel_workflows", "orchestration.cancel_workflow"),
        ("pause_workflows", "orchestration.cancel_workflow"),
        ("resume_workflows", "orchestration.cancel_workflow"),
        ("requeue_stuck_workflows", "orchestration.retry_workflow"),
        ("pause_queues", "orchestration.change_workflowqueue"),
        ("pause_schedules", "orchestration.change_workflowschedule"),
        ("run_schedules_now", "orchestration.change_workflowschedule"),
    ]:
        assert any(f"`{name}`" in row and f"`{permission}`" in row for row in actions.splitlines()), name


def test_site__every_python_sample_on_its_pages_parses():
    samples = 0
    for page in sorted(DOCS.rglob("*.md")):
        for code in re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL):
            if not code.lstrip().startswith("--8<--"):  # a snippet: the module it comes from is tested
                ast.parse(code, filename=str(page))
                samples += 1
    assert samples > 10
