"""Workflow ids are UUIDv7: time first, so new rows share the right edge of every index keyed by them."""

from __future__ import annotations

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
