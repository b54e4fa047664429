"""Which database errors are an outage (``orchestration.outages.is_outage``),
each raised by PostgreSQL itself, as the worker and the commands meet them."""

from __future__ import annotations

import psycopg
import pytest
from django.db import DatabaseError, connection, transaction

from orchestration.outages import database_name, is_outage
from tests.support import database_conninfo

pytestmark = pytest.mark.django_db


def raised_by_postgres(sqlstate: str) -> DatabaseError:
    """The error Django raises for an error of ``sqlstate`` from the server."""
    with pytest.raises(DatabaseError) as raised, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '{sqlstate}'; END $$")
    return raised.value


@pytest.mark.parametrize(
    "sqlstate",
    [
        "25006",  # read_only_sql_transaction: a standby, a failover's switch
        "57P01",  # admin_shutdown
        "57P03",  # cannot_connect_now
        "53300",  # too_many_connections
        "08006",  # connection_failure
    ],
)
def test_is_outage__the_server_unavailable_or_refusing_writes(sqlstate):
    assert is_outage(raised_by_postgres(sqlstate))


@pytest.mark.parametrize(
    "sqlstate",
    [
        "23505",  # unique_violation
        "22P02",  # invalid_text_representation
        "57014",  # query_canceled: a statement timeout
        "40P01",  # deadlock_detected
        "P0001",  # raise_exception: a trigger refusing a row
    ],
)
def test_is_outage__not_for_an_error_of_the_statement_itself(sqlstate):
    assert not is_outage(raised_by_postgres(sqlstate))


def test_is_outage__a_read_only_session_refusing_a_write():
    read_only = psycopg.connect(database_conninfo(options="-c default_transaction_read_only=on"))
    with read_only, pytest.raises(psycopg.Error) as raised:
        read_only.execute("CREATE TABLE refused (id int)")
    assert is_outage(raised.value)


def test_is_outage__a_server_that_is_not_there():
    with pytest.raises(psycopg.Error) as raised:
        psycopg.connect(database_conninfo(host="127.0.0.1", port="1"), connect_timeout=5)
    assert is_outage(raised.value)


def test_is_outage__a_result_libpq_cut_short_with_no_sqlstate():
    """A server that died mid-result (a failover's crash): libpq's error has no
    SQLSTATE, so psycopg raises its base DatabaseError, and Django wraps it."""
    cut_short = psycopg.DatabaseError("server closed the connection unexpectedly")
    wrapped = DatabaseError(str(cut_short))
    wrapped.__cause__ = cut_short
    assert is_outage(cut_short) and is_outage(wrapped)


def test_is_outage__not_for_an_error_that_is_not_the_databases():
    assert not is_outage(ValueError("bad input"))


def test_database_name__host_port_and_name_never_the_password():
    named = database_name("default")
    settings = connection.settings_dict
    assert named == f"{settings['HOST'] or 'localhost'}:{settings['PORT'] or '5432'}/{settings['NAME']}"
    assert not settings.get("PASSWORD") or settings["PASSWORD"] not in named
