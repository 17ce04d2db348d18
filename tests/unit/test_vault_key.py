"""The embedded vault's key file: `herald api` and `herald worker` started together on a fresh
data dir both create it; every process must end with the same, whole key."""

from __future__ import annotations

import io
import logging
import multiprocessing
import stat
from pathlib import Path

import pytest
from cryptography.fernet import Fernet, InvalidToken
from pydantic import ValidationError

from herald.config import Settings
from herald.secrets.vault import key_ring, vault_key


def _key_of(data_dir: str, start: object, out: object) -> None:
    start.wait()  # type: ignore[attr-defined]
    out.put(vault_key(Settings(data_dir=Path(data_dir))))  # type: ignore[attr-defined]


def test_processes_racing_to_create_the_key_all_read_one_whole_key(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    for attempt in range(5):
        data_dir = tmp_path / f"data{attempt}"
        start, out = context.Event(), context.Queue()
        racers = [
            context.Process(target=_key_of, args=(str(data_dir), start, out)) for _ in range(8)
        ]
        for racer in racers:
            racer.start()
        start.set()
        keys = {out.get(timeout=30) for _ in racers}
        for racer in racers:
            racer.join(timeout=30)
            assert racer.exitcode == 0
        assert len(keys) == 1
        (key,) = keys
        Fernet(key)  # a whole key, not a file read while it was being written
        path = data_dir / "vault.key"
        assert path.read_bytes().strip() == key
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [p.name for p in data_dir.iterdir()] == ["vault.key"]  # no staging file left


def test_a_configured_key_wins_over_the_file(tmp_path: Path) -> None:
    assert vault_key(Settings(data_dir=tmp_path, vault_key="configured")) == b"configured"
    assert not (tmp_path / "vault.key").exists()


def test_the_key_ring_encrypts_under_the_primary_and_reads_every_old_key(tmp_path: Path) -> None:
    """Issue 44 (item 4): HERALD_VAULT_KEY writes; it and each of HERALD_VAULT_OLD_KEYS read."""
    primary, older, oldest = (Fernet.generate_key() for _ in range(3))
    settings = Settings(
        data_dir=tmp_path,
        vault_key=primary.decode(),
        vault_old_keys=f"{older.decode()}, {oldest.decode()}",
    )
    ring = key_ring(settings)
    Fernet(primary).decrypt(ring.encrypt(b"x"))
    for old in (older, oldest):
        assert ring.decrypt(Fernet(old).encrypt(b"written before")) == b"written before"
        with pytest.raises(InvalidToken):
            Fernet(old).decrypt(ring.encrypt(b"x"))
    assert (
        key_ring(Settings(data_dir=tmp_path, vault_key=primary.decode())).decrypt(
            Fernet(primary).encrypt(b"y")
        )
        == b"y"
    )


def test_a_malformed_old_key_refuses_to_start_without_showing_it(tmp_path: Path) -> None:
    """Issue 44 (item 4): the message names the entry's position, never its value."""
    good = Fernet.generate_key().decode()
    with pytest.raises(ValidationError) as refused:
        Settings(data_dir=tmp_path, vault_old_keys=f"{good},definitely-not-a-key")
    (error,) = refused.value.errors()
    assert "HERALD_VAULT_OLD_KEYS: entry 2 is not a Fernet key" in error["msg"]
    assert "definitely-not-a-key" not in error["msg"] and good not in error["msg"]


def test_each_old_key_is_cut_out_of_log_lines(tmp_path: Path) -> None:
    """Issue 44 (item 4): a key of the ring logged alone never shows (the opaque-run pattern
    cuts a Fernet key out of any line, whether or not the whole list was remembered)."""
    from herald.observability import logs

    first, second = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    logs.remember_credentials(Settings(data_dir=tmp_path, vault_old_keys=f"{first},{second}"))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.formatter("worker", "json"))
    logger = logging.getLogger("herald.test_vault_ring")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("tried %s then %s", first, second)
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue()
    assert first not in stream.getvalue() and second not in stream.getvalue()
