"""Workflow ids are UUIDv7: time first, so new rows share the right edge of every index keyed by them."""

from __future__ import annotations

import pickle
import time
import uuid

from orchestration.enqueue import time_ordered_uuid


def test_time_ordered_uuid__is_a_version_7_rfc_9562_uuid():
    value = time_ordered_uuid()
    assert (value.version, value.variant) == (7, uuid.RFC_4122)


def test_time_ordered_uuid__starts_with_the_unix_time_in_milliseconds():
    before = time.time_ns() // 1_000_000
    value = time_ordered_uuid()
    after = time.time_ns() // 1_000_000
    assert before <= value.int >> 80 <= after


def test_time_ordered_uuids__of_later_milliseconds_sort_after_earlier_ones():
    earlier = time_ordered_uuid()
    time.sleep(0.002)
    assert time_ordered_uuid() > earlier


def test_time_ordered_uuids__of_the_same_millisecond_differ():
    assert len({time_ordered_uuid() for _ in range(1000)}) == 1000


def test_time_ordered_uuid__behaves_as_the_uuid_its_text_parses_to():
    value = time_ordered_uuid()
    parsed = uuid.UUID(str(value))
    assert (value, hash(value), value.is_safe) == (parsed, hash(parsed), parsed.is_safe)
    assert pickle.loads(pickle.dumps(value)) == parsed
