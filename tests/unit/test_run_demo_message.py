"""The demo's closing message says from when a retry of the failed payout succeeds."""

from __future__ import annotations

import datetime
import re

from django.utils import timezone

from project.demo.management.commands.run_demo import bank_back_at


def test_bank_back_at__names_the_time_the_admin_shows_and_how_far_off_it_is():
    until = timezone.now() + datetime.timedelta(seconds=42.3)
    text = bank_back_at(until)
    assert text.startswith(f"from {timezone.localtime(until):%H:%M:%S} {timezone.localtime(until).tzname()} on, ")
    assert re.search(r", 4[23] s from now \(its bank is down until then, so a retry before that fails again\)$", text)


def test_bank_back_at__once_the_bank_is_back_says_a_retry_succeeds_now():
    assert bank_back_at(timezone.now()) == "(its bank is back up: a retry succeeds now)"
