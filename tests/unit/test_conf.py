"""``conf``: each setting read once, and read again when the settings change."""

from __future__ import annotations

import pytest
from django.test import override_settings

from orchestration.conf import conf


def test_a_setting_not_given__reads_as_its_default():
    with override_settings(ORCHESTRATION={}):
        assert conf.POLL_INTERVAL == 1.0


def test_a_setting_changed_with_override_settings__reads_as_the_new_value_and_back_after():
    with override_settings(ORCHESTRATION={"POLL_INTERVAL": 0.25}):
        assert conf.POLL_INTERVAL == 0.25
        with override_settings(ORCHESTRATION={"POLL_INTERVAL": 2}):
            assert conf.POLL_INTERVAL == 2
        assert conf.POLL_INTERVAL == 0.25


def test_a_setting_changed_with_the_settings_fixture__reads_as_the_new_value(settings):
    settings.ORCHESTRATION = {"STUCK_AFTER": 60}
    assert conf.STUCK_AFTER == 60
    settings.ORCHESTRATION = {"STUCK_AFTER": 90}
    assert conf.STUCK_AFTER == 90


def test_an_unknown_setting__is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="unknown orchestration setting 'STUCK_AFTR'"):
        conf.STUCK_AFTR  # noqa: B018 (the read is the test)
