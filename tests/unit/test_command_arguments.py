"""Every management command's numeric option, given a value it refuses, states
its rule and the value ("--concurrency must be a whole number of 1 or more,
got 0"), not argparse's "invalid _positive_int value"."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command, find_commands, load_command_class

import orchestration.management
from orchestration.management.arguments import Bounded


def numeric_options():
    """(command, the subcommand's words, the option, its action) for every
    option of every command of the app that takes a number."""
    folder = Path(orchestration.management.__file__).parent
    for name in find_commands(str(folder)):
        parser = load_command_class("orchestration", name).create_parser("manage.py", name)
        yield from _options(name, (), parser)


def _options(name, words, parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, sub in action.choices.items():
                yield from _options(name, (*words, word), sub)
        elif (
            action.option_strings
            and (isinstance(action, Bounded) or action.type in (int, float))
            and not action.choices
        ):
            # (Django's --verbosity has choices, which argparse names when it refuses a value.)
            yield pytest.param(name, words, action.option_strings[0], action, id=" ".join((name, *words, action.dest)))


def refusal(*args: str) -> str:
    with pytest.raises(CommandError) as raised:
        call_command(*args)
    return str(raised.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("runworkers", "--concurrency", "0"), "--concurrency must be a whole number of 1 or more, got 0"),
        (("runworkers", "--poll-interval", "0"), "--poll-interval must be a number of seconds above 0, got 0"),
        (("purge_workflows", "--older-than", "-1"), "--older-than must be a number of days, 0 or more, got -1"),
        (("runworkers", "--metrics-port", "70000"), "--metrics-port must be a whole number from 1 to 65535, got 70000"),
    ],
)
def test_a_refused_value__is_answered_with_the_options_rule(args, message):
    assert refusal(*args) == f"Error: {message}"


@pytest.mark.parametrize(("command", "words", "option", "action"), list(numeric_options()))
def test_every_numeric_option_of_every_command__states_its_rule_for_a_value_it_refuses(command, words, option, action):
    assert isinstance(action, Bounded), f"{option} of {command} is a bare type={action.type.__name__}"
    for value in ("-1", "x", "nan"):
        assert refusal(command, *words, option, value) == f"Error: {option} must be {action.rule}, got {value}"


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--concurrency", "0", "--concurrency must be a whole number of 1 or more, got 0; none lifts the limit"),
        ("--rate-limit", "fast", "--rate-limit must be a rate written N/s, N/m or N/h (N from 1 to 999999999)"),
    ],
)
def test_workflow_queues_limits__a_refused_limit_states_the_rule(option, value, message):
    assert message in refusal("workflow_queues", "limits", "default", option, value)
