import datetime
import enum
import json
import math

import pytest
from django.test import override_settings

from orchestration.errors import InvalidWorkflowInput
from orchestration.validation import (
    NotJSONSerializable,
    to_json,
    to_json_value,
    validate_options,
    validate_step_timeout,
)


class Weekday(enum.IntEnum):
    TUESDAY = 2


GOOD = dict(idempotency_key=None, queue="default", priority=0, max_retries=3)


def test_to_json_value__round_trips_like_jsonb():
    assert to_json_value({"a": (1, 2)}, "x") == {"a": [1, 2]}


@pytest.mark.parametrize(
    "value",
    [
        *(None, True, False, 0, -7, 2**70, Weekday.TUESDAY, 0.1),
        *("plain", "caf\u00e9 \U0001f600", "\ud83d\ude00", {1: "key"}, ("a",)),
    ],
)
def test_to_json__gives_the_value_as_json_decodes_its_text_and_that_text(value):
    output, encoded = to_json(value, "x")
    assert encoded == json.dumps(value)
    assert output == json.loads(encoded) and type(output) is type(json.loads(encoded))


@pytest.mark.parametrize("value", [{1, 2}, object(), math.nan, datetime.date(2024, 1, 1)])
def test_to_json_value__names_what_is_not_json(value):
    with pytest.raises(NotJSONSerializable, match="The input of workflow 'x' is not JSON-serialisable"):
        to_json_value(value, "The input of workflow 'x'")


def test_to_json_value__names_an_int_too_long_to_write():
    with pytest.raises(NotJSONSerializable, match="The result of step 1 is not JSON-serialisable: Exceeds the limit"):
        to_json_value(10**5000, "The result of step 1")


def test_to_json_value__rejects_nul_characters():
    with pytest.raises(NotJSONSerializable, match="NUL"):
        to_json_value("a\x00b", "x")


@override_settings(ORCHESTRATION={"MAX_PAYLOAD_BYTES": 100})
def test_to_json_value__rejects_payloads_over_the_limit():
    with pytest.raises(InvalidWorkflowInput, match="over the 100-byte limit"):
        to_json_value("x" * 200, "x")


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("max_retries", -1, "max_retries"),
        ("max_retries", True, "max_retries"),
        ("priority", "high", "priority"),
        ("queue", "", "queue name"),
        ("queue", "a,b", "queue name"),
        ("queue", "a\tb", "control character"),
        ("idempotency_key", "k" * 300, "idempotency_key"),
    ],
)
def test_validate_options__rejects_bad_values_with_a_message_naming_them(option, value, message):
    with pytest.raises(InvalidWorkflowInput, match=message):
        validate_options(**{**GOOD, option: value})


@pytest.mark.parametrize("value", [1, 0.25, datetime.timedelta(minutes=2)])
def test_validate_step_timeout__takes_seconds_or_a_timedelta(value):
    seconds = value.total_seconds() if isinstance(value, datetime.timedelta) else value
    assert validate_step_timeout(value, "timeout") == seconds


@pytest.mark.parametrize("value", [0, -1, math.inf, math.nan, True, "5", (3.05, 27)])
def test_validate_step_timeout__rejects_what_is_no_limit_and_says_how_to_time_out_fn(value):
    with pytest.raises(InvalidWorkflowInput, match=r"functools\.partial\(fn, timeout=\.\.\.\)"):
        validate_step_timeout(value, "ctx.step('fetch') timeout")
