"""The embedded vault's key file: `herald api` and `herald worker` started together on a fresh
data dir both create it; every process must end with the same, whole key."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path

from cryptography.fernet import Fernet

from herald.config import Settings
from herald.secrets.vault import vault_key


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
