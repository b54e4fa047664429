"""The libpq options that make a worker give up a silent link to the database
within a quarter of ``STUCK_AFTER`` (2 to 30 s), where the project sets none."""

from __future__ import annotations

import pytest

from orchestration.worker.links import dead_link_seconds, link_options, missing_link_options

STUCK_AFTERS = [1, 4, 10, 12, 20, 60, 100, 300, 3600]


def test_links_module_examples_hold():
    import doctest

    from orchestration.worker import links

    assert doctest.testmod(links).failed == 0


@pytest.mark.parametrize(("stuck_after", "seconds"), [(300, 30), (3600, 30), (100, 25), (20, 5), (8, 2), (1, 2)])
def test_dead_link_seconds__is_a_quarter_of_stuck_after_from_2_to_30(stuck_after, seconds):
    assert dead_link_seconds(stuck_after) == seconds


@pytest.mark.parametrize("stuck_after", STUCK_AFTERS)
def test_link_options__give_up_an_idle_connection_within_the_bound(stuck_after):
    options = link_options(stuck_after)
    probing = options["keepalives_interval"] * options["keepalives_count"]
    assert options["keepalives"] == 1
    assert options["keepalives_idle"] + probing <= dead_link_seconds(stuck_after)


@pytest.mark.parametrize("stuck_after", STUCK_AFTERS)
def test_link_options__give_up_a_query_and_a_connect_within_the_bound(stuck_after):
    options = link_options(stuck_after)
    assert options["tcp_user_timeout"] == dead_link_seconds(stuck_after) * 1000
    assert 2 <= options["connect_timeout"] <= dead_link_seconds(stuck_after)


def test_missing_link_options__leave_out_each_option_the_project_sets():
    project = {"keepalives_idle": 60, "tcp_user_timeout": 0, "connect_timeout": 10}
    assert missing_link_options(project, 300) == {"keepalives": 1, "keepalives_interval": 5, "keepalives_count": 3}


def test_missing_link_options__are_none_for_a_libpq_service_named_in_the_options():
    assert missing_link_options({"service": "queue"}, 300) == {}


def test_missing_link_options__are_none_for_a_libpq_service_named_in_the_environment(monkeypatch):
    monkeypatch.setenv("PGSERVICE", "queue")
    assert missing_link_options({}, 300) == {}
