"""HERALD_DATABASE_URL with several hosts: one canonical form for SQLAlchemy, psycopg and libpq."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import make_url

from herald.db.engine import (
    DEFAULT_CONNECT_TIMEOUT_SECONDS,
    libpq_url,
    parse_database_url,
    sqlalchemy_url,
    with_database,
)

TWO_HOSTS = {"host": "db1,db2", "port": "5433,5434", "target_session_attrs": "read-write"}


def dialect_args(url: str) -> dict[str, object]:
    """What SQLAlchemy's psycopg dialect hands psycopg.connect() for this URL."""
    _, kwargs = PGDialect_psycopg().create_connect_args(make_url(sqlalchemy_url(url)))
    return dict(kwargs)


def libpq_params(url: str) -> dict[str, object]:
    """What libpq itself reads from libpq_url(url)."""
    return dict(conninfo_to_dict(libpq_url(url)))


@pytest.mark.parametrize(
    "url",
    [
        # several host:port pairs in the address (libpq's URI form; SQLAlchemy cannot parse it)
        "postgresql://herald@db1:5433,db2:5434/herald?target_session_attrs=read-write",
        # comma lists in the query
        "postgresql://herald@/herald?host=db1,db2&port=5433,5434&target_session_attrs=read-write",
        # one host= per server with its port (SQLAlchemy's own multi-host form)
        "postgresql://herald@/herald?host=db1:5433&host=db2:5434&target_session_attrs=read-write",
        # one host= and one port= per server (SQLAlchemy refuses this mix as it stands)
        "postgresql://herald@/herald?host=db1&host=db2&port=5433&port=5434"
        "&target_session_attrs=read-write",
        # libpq's keyword/value form
        "host=db1,db2 port=5433,5434 dbname=herald user=herald target_session_attrs=read-write",
        # SQLAlchemy's driver name is accepted too
        "postgresql+psycopg://herald@db1:5433,db2:5434/herald?target_session_attrs=read-write",
    ],
)
def test_every_multi_host_form_reaches_the_driver_as_one_host_list(url: str) -> None:
    """SQLAlchemy's dialect and libpq both see the same two servers, in order, with their ports,
    target_session_attrs and a connect_timeout."""
    expected = {
        **TWO_HOSTS,
        "dbname": "herald",
        "user": "herald",
        "connect_timeout": str(DEFAULT_CONNECT_TIMEOUT_SECONDS),
    }
    assert dialect_args(url) == expected
    assert libpq_params(url) == expected
    assert sqlalchemy_url(url).startswith("postgresql+psycopg://")
    assert libpq_url(url).startswith("postgresql://")


def test_the_engine_url_round_trips_through_libpq_url() -> None:
    """The worker and the realtime hub build their LISTEN connection from engine.url: the same
    hosts come back out, and connect_timeout is not added twice."""
    url = "postgresql://herald:pw@db1:5433,db2:5434/herald?target_session_attrs=read-write"
    rendered = make_url(sqlalchemy_url(url)).render_as_string(hide_password=False)
    assert libpq_params(rendered) == libpq_params(url)
    assert libpq_url(rendered).count("connect_timeout") == 1


def test_a_single_host_url_keeps_its_shape_and_gains_a_connect_timeout() -> None:
    url = "postgresql://postgres@127.0.0.1:5432/test"
    assert (
        sqlalchemy_url(url) == "postgresql+psycopg://postgres@127.0.0.1:5432/test?connect_timeout=5"
    )
    assert libpq_url(url) == "postgresql://postgres@127.0.0.1:5432/test?connect_timeout=5"
    assert dialect_args(url) == {
        "host": "127.0.0.1",
        "port": 5432,
        "dbname": "test",
        "user": "postgres",
        "connect_timeout": "5",
    }


def test_a_connect_timeout_in_the_url_wins() -> None:
    url = "postgresql://u@db1,db2/d?connect_timeout=12&sslmode=require"
    assert libpq_params(url) == {
        "host": "db1,db2",
        "dbname": "d",
        "user": "u",
        "connect_timeout": "12",
        "sslmode": "require",
    }


def test_password_with_reserved_characters_survives() -> None:
    url = "postgresql://herald:p%40ss%2Fw%3Ard@db1:5433,db2:5434/herald"
    assert dialect_args(url)["password"] == "p@ss/w:rd"
    assert libpq_params(url)["password"] == "p@ss/w:rd"


def test_one_port_applies_to_every_host_and_missing_ports_stay_default() -> None:
    assert libpq_params("postgresql://u@/d?host=db1,db2&port=6432")["port"] == "6432,6432"
    assert libpq_params("postgresql://u@db1:6432,db2/d")["port"] == "6432,"
    assert "port" not in libpq_params("postgresql://u@db1,db2/d")


def test_ipv6_and_socket_directories() -> None:
    params = libpq_params("postgresql://u@[::1]:5433,[::1]:5434/d")
    assert (params["host"], params["port"]) == ("::1,::1", "5433,5434")
    params = libpq_params("postgresql://u@/d?host=/var/run/postgresql,db2&port=5432,5433")
    assert (params["host"], params["port"]) == ("/var/run/postgresql,db2", "5432,5433")
    assert dialect_args("postgresql://u@/d?host=/var/run/postgresql")["host"] == (
        "/var/run/postgresql"
    )


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@/d?host=a,b,c&port=1,2",  # three hosts, two ports
        "postgresql://u@a:1,b:x/d",  # a port that is no number
    ],
)
def test_a_port_list_libpq_would_refuse_is_refused_here(url: str) -> None:
    with pytest.raises(ValueError):
        parse_database_url(url)


def test_with_database_keeps_every_host() -> None:
    url = "postgresql://u@db1:5433,db2:5434/postgres?target_session_attrs=read-write"
    assert libpq_params(with_database(url, "herald_x")) == {
        **TWO_HOSTS,
        "dbname": "herald_x",
        "user": "u",
        "connect_timeout": "5",
    }
