"""A transaction PostgreSQL rolled back to break a deadlock is told apart from an outage.

psycopg raises deadlock_detected (40P01) and serialization_failure (40001) as OperationalErrors,
the class a dropped connection has; herald.outages once counted them as the database
going away — a warning that it was "unavailable", its state down until the next success, and the
API's answer 503 DATABASE_UNAVAILABLE — for a server that was up and had only chosen a victim.
"""

from __future__ import annotations

import logging

import psycopg
import pytest
import sqlalchemy.exc

from herald import outages


def _wrapped(error: BaseException) -> sqlalchemy.exc.DBAPIError:
    """As SQLAlchemy hands it on: its own OperationalError around psycopg's."""
    try:
        try:
            raise error
        except psycopg.Error as inner:
            raise sqlalchemy.exc.OperationalError("UPDATE …", {}, inner) from inner
    except sqlalchemy.exc.OperationalError as outer:
        return outer


@pytest.mark.parametrize(
    "error", [psycopg.errors.DeadlockDetected("deadlock"), psycopg.errors.SerializationFailure("x")]
)
def test_a_conflict_is_not_an_outage(
    error: psycopg.Error, caplog: pytest.LogCaptureFixture
) -> None:
    dependency = outages.Dependency(outages.DATABASE)
    for exc in (error, _wrapped(error)):
        assert outages.is_conflict(exc)
        with caplog.at_level(logging.INFO, logger="herald.outages"):
            dependency.failed(exc)
    assert not dependency.is_down and dependency.failures == 0
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING]
    assert "unavailable" not in caplog.text and "running it again" in caplog.text


def test_an_outage_is_still_one() -> None:
    dependency = outages.Dependency(outages.DATABASE)
    dropped = psycopg.OperationalError("server closed the connection unexpectedly")
    assert not outages.is_conflict(dropped) and not outages.is_conflict(_wrapped(dropped))
    assert outages.unavailable(_wrapped(dropped)) == outages.DATABASE
    dependency.failed(dropped)
    assert dependency.is_down and dependency.failures == 1
    assert not outages.is_conflict(ValueError("not a database error"))
