"""``wire.run`` sends the hot statements on a raw cursor of the server
connection (``orchestration.claim.wire``): the same rows, types, errors and
transactions as psycopg's cursor gives them."""

from __future__ import annotations

import datetime
import uuid

import pytest
from django.db import DataError, OperationalError, connection, transaction

from orchestration.claim import wire
from tests.support import other_connection

pytestmark = pytest.mark.django_db(transaction=True)  # autocommit, as a worker runs

TYPED = (
    "SELECT %(id)s::uuid, %(n)s::integer, %(text)s, %(doc)s::jsonb, %(at)s::timestamptz, %(none)s::integer, "
    "%(id)s::uuid = %(id)s::uuid, %(ratio)s::float8, '50%%'"
)
PARAMS = {
    "id": uuid.uuid4(),
    "n": 7,
    "text": "ünïcode",
    "doc": '{"a": [1, 2]}',
    "at": datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC),
    "none": None,
    "ratio": 0.25,
}


def _prepared_here(text: str) -> int:
    """How many statements of ``text`` this session has prepared."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement = %s", [text])
        return int(cursor.fetchone()[0])


def test_positional__refuses_a_placeholder_a_raw_cursor_cannot_bind():
    with pytest.raises(ValueError, match="%b"):
        wire.positional("SELECT %b")


def test_run__returns_the_rows_and_types_the_cursor_returns():
    with connection.cursor() as cursor:
        cursor.execute(TYPED, PARAMS)
        expected = cursor.fetchall()
    assert wire.run(connection.alias, TYPED, PARAMS) == expected
    assert expected[0][6] is True and expected[0][8] == "50%"


def test_run__positional_placeholders__are_bound_in_their_order():
    assert wire.run(connection.alias, "SELECT %s::integer - %s::integer", (10, 3)) == [(7,)]


def test_run__with_a_preparing_connection__prepares_its_statement_once():
    connection.ensure_connection()
    if connection.connection.prepare_threshold is None:
        pytest.skip("this connection prepares nothing (prepare_threshold None)")
    for n in range(3):
        assert wire.run(connection.alias, "SELECT %(n)s::integer + 1", {"n": n}) == [(n + 1,)]
    assert _prepared_here("SELECT $1::integer + 1") == 1


def test_run__after_its_prepared_statements_were_deallocated__prepares_them_again():
    wire.run(connection.alias, "SELECT %(n)s::integer", {"n": 1})
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    assert wire.run(connection.alias, "SELECT %(n)s::integer", {"n": 2}) == [(2,)]


def test_run__without_prepare_threshold__leaves_no_statement_prepared():
    connection.ensure_connection()
    connection.connection.prepare_threshold = None
    try:
        assert wire.run(connection.alias, "SELECT %(n)s::integer", {"n": 3}) == [(3,)]
        assert _prepared_here("SELECT $1::integer") == 0
    finally:
        connection.close()  # the next test's connection prepares as configured


def test_run__inside_atomic__runs_in_its_transaction():
    read = "SELECT current_setting('orchestration.test_mark', true)"
    with transaction.atomic():
        wire.run(connection.alias, "SELECT set_config('orchestration.test_mark', %(mark)s, true)", {"mark": "inside"})
        assert wire.run(connection.alias, read, None) == [("inside",)]
    assert wire.run(connection.alias, read, None) in ([("",)], [(None,)])


def test_run__an_error__is_djangos_class_for_it__and_the_connection_goes_on():
    with pytest.raises(DataError, match="uuid"):
        wire.run(connection.alias, "SELECT %(id)s::uuid", {"id": "not a uuid"})
    assert wire.run(connection.alias, "SELECT %(n)s::integer", {"n": 5}) == [(5,)]


def test_run__on_a_terminated_server_connection__raises_operational_error__then_reconnects():
    ((pid,),) = wire.run(connection.alias, "SELECT pg_backend_pid()", None)
    with other_connection() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    with pytest.raises(OperationalError):
        wire.run(connection.alias, "SELECT %(n)s::integer", {"n": 1})
    connection.close_if_unusable_or_obsolete()
    ((again,),) = wire.run(connection.alias, "SELECT pg_backend_pid()", None)
    assert again != pid
