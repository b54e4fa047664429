import datetime
import math

import pytest
from django.test import override_settings

from orchestration.errors import InvalidWorkflowInput
from orchestration.validation import NotJSONSerializable, to_json_value, validate_options

GOOD = dict(idempotency_key=None, run_after=None, queue="default", priority=0, max_retries=3)


def test_to_json_value__round_trips_like_jsonb():
    assert to_json_value({"a": (1, 2)}, "x") == {"a": [1, 2]}


@pytest.mark.parametrize("value", [{1, 2}, object(), math.nan, datetime.date(2024, 1, 1)])
def test_to_json_value__names_what_is_not_json(value):
    with pytest.raises(NotJSONSerializable, match="The input of workflow 'x' is not JSON-serialisable"):
        to_json_value(value, "The input of workflow 'x'")


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
        ("run_after", datetime.datetime(2030, 1, 1), "naive"),
        ("max_retries", -1, "max_retries"),
        ("max_retries", True, "max_retries"),
        ("priority", "high", "priority"),
        ("queue", "", "queue name"),
        ("queue", "a,b", "queue name"),
        ("idempotency_key", "k" * 300, "idempotency_key"),
    ],
)
def test_validate_options__rejects_bad_values_with_a_message_naming_them(option, value, message):
    with pytest.raises(InvalidWorkflowInput, match=message):
        validate_options(**{**GOOD, option: value})
