"""Writes bench/REPORT.md: every bench of `make bench` at a small size, beside the claim-loop anchor,
with the machine, the date and the commit — today's figures, each beside its own baseline.

    .venv/bin/python bench/report.py [--anchor ../shared/anchors/claim_loop.py] [--out bench/REPORT.md]
        [--only api,send] [--timeout 300]

The anchor is also passed to the benches that run it themselves (HERALD_ANCHOR_CLAIM_LOOP).

`make bench-report` runs it. Each bench runs as its own subprocess with the flags in BENCHES (sizes
chosen so the whole report takes a few minutes on a 2-core machine; the bench's own defaults are
the sizes its figures were designed at) and its stdout goes into the report as it printed it: a
bench prints its baseline beside its figure, so the report quotes rather than interprets. A bench
that fails or times out is reported as such with the end of its stderr, and the others still run.
Uses HERALD_BENCH_DATABASE_URL, else the embedded PostgreSQL under .herald/bench, as the benches do.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from bench import _harness  # noqa: E402
from herald.db.engine import libpq_url  # noqa: E402


def default_anchor() -> Path:
    """../shared/anchors/claim_loop.py from the checkout (shared/ beside it, not in it); from a
    worktree nested deeper, the first shared/ above it."""
    relative = Path("shared") / "anchors" / "claim_loop.py"
    for parent in ROOT.parents:
        if (parent / relative).exists():
            return parent / relative
    return ROOT.parent / relative


# (bench, flags): the small size each runs at here. The order is `make bench`'s.
BENCHES: list[tuple[str, list[str]]] = [
    ("fanout", ["--people", "10000", "--workers", "1"]),
    (
        "delivery",
        [
            "--deliveries",
            "5000",
            "--repeat",
            "1",
            "--depths",
            "10000",
            "--claims",
            "20",
            "--workers",
            "1",
            "--peer-jobs",
            "0",
        ],
    ),
    ("queue_shapes", ["--deliveries", "5000", "--rounds", "1", "--history-rows", "10000"]),
    ("send", ["--sends", "500", "--warmup", "50"]),
    ("api", ["--requests", "200", "--warmup", "200", "--concurrency", "8"]),
    (
        "inbox",
        [
            "--people",
            "20000",
            "--rows",
            "200000",
            "--requests",
            "200",
            "--warmup",
            "200",
            "--concurrency",
            "8",
        ],
    ),
    ("import", ["--people", "10000"]),
    ("realtime", ["--people", "200", "--events", "5"]),
    ("retention", ["--deliveries", "50000"]),
    ("scheduler", ["--schedules", "100", "--ticks", "50"]),
    ("broadcast", ["--people", "20000"]),
    # Its issue's size is 1,000,000 pending steps (the default --sizes 10000,1000000).
    ("escalation", ["--sizes", "10000,100000", "--ticks", "50"]),
    ("followups", ["--tenants", "10", "--idle-rows", "200", "--due", "1000", "--sweeps", "5"]),
    ("webhooks", ["--deliveries", "2000", "--messages", "500"]),
    # Its figures were designed at --rows 1000000 (about four minutes to load on 2 cores).
    ("person_reads", ["--rows", "50000", "--deep", "5000", "--runs", "20", "--baseline-runs", "3"]),
    # Through PgBouncer in transaction mode against direct; needs Debian's pgbouncer.
    ("pgbouncer", ["--requests", "300", "--warmup", "200", "--rounds", "3", "--sends", "1000"]),
    # Builds a primary and its standby of its own (PostgreSQL 15 binaries) and needs Redis
    # (HERALD_BENCH_REDIS_URL, else redis://127.0.0.1:6379/0); its issue's size is --rows 10000000.
    ("replica", ["--rows", "100000", "--people", "2000", "--requests", "1500", "--warmup", "500"]),
]


@dataclass
class Run:
    name: str
    command: list[str]
    seconds: float
    returncode: int | None  # None: timed out
    stdout: str
    stderr: str


def run(name: str, command: list[str], timeout: float) -> Run:
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )
        code: int | None = done.returncode
        out, err = done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        code = None
        out = _text(expired.stdout)
        err = _text(expired.stderr)
    seconds = time.perf_counter() - started
    print(f"{name:14} {seconds:6.1f} s  {'ok' if code == 0 else 'FAILED'}", flush=True)
    return Run(name, command, seconds, code, out, err)


def _text(value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""


def machine(server: str) -> list[str]:
    """Cores, memory, CPU model, PostgreSQL and Python: what a reader needs to weigh the figures."""
    model = platform.processor() or "?"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = "?"
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        kib = int(meminfo.read_text().split("MemTotal:", 1)[1].split()[0])
        memory = f"{kib / 1024 / 1024:.1f} GiB"
    with psycopg.connect(libpq_url(server), autocommit=True) as conn:
        row = conn.execute("SELECT version()").fetchone()
    postgres = str(row[0]) if row else "?"
    return [
        f"- CPU: {model}, {os.cpu_count()} cores",
        f"- Memory: {memory}",
        f"- PostgreSQL: {postgres}",
        f"- Python: {platform.python_version()} on {platform.platform()}",
        f"- Load average at the start: {os.getloadavg()[0]:.2f}",
    ]


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--", "src") else ""
    return f"{git('rev-parse', '--short=12', 'HEAD')} {git('log', '-1', '--format=%s')}{dirty}"


def shown(command: list[str]) -> str:
    """The command as a reader reruns it: paths inside the checkout relative, passwords hidden."""

    def part(word: str) -> str:
        if "://" in word:
            return make_url(word).render_as_string(hide_password=True)
        return str(Path(word).relative_to(ROOT)) if word.startswith(str(ROOT)) else word

    return " ".join(part(word) for word in command)


def section(result: Run) -> list[str]:
    status = (
        "ok"
        if result.returncode == 0
        else ("timed out" if result.returncode is None else f"exit {result.returncode}")
    )
    lines = [
        f"## {result.name}",
        "",
        f"`{shown(result.command)}` — {result.seconds:.1f} s, {status}",
        "",
        "```",
        result.stdout.rstrip() or "(no output)",
        "```",
    ]
    if result.returncode != 0:
        lines += ["", "stderr (end):", "", "```", result.stderr.rstrip()[-3000:], "```"]
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--anchor", type=Path, default=default_anchor(), help="claim_loop.py")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "REPORT.md")
    parser.add_argument("--only", default="", help="comma-separated benches (default: all)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds each bench may take")
    args = parser.parse_args()
    only = {name for name in args.only.split(",") if name}

    server = _harness.bench_server()
    # The benches read the server from here, so they and the anchor share it.
    os.environ["HERALD_BENCH_DATABASE_URL"] = server
    os.environ["HERALD_ANCHOR_CLAIM_LOOP"] = str(args.anchor)
    started_at = datetime.now(UTC)
    started = time.perf_counter()
    head = machine(server)
    runs: list[Run] = []
    if args.anchor.exists():
        for ties in ([], ["--ties"]):
            runs.append(
                run(
                    "anchor" + (" (ties)" if ties else ""),
                    [
                        sys.executable,
                        str(args.anchor),
                        "--dsn",
                        libpq_url(server),
                        "--rows",
                        "50000",
                        "--batch",
                        "100",
                        *ties,
                    ],
                    args.timeout,
                )
            )
    for name, flags in BENCHES:
        if not only or name in only:
            runs.append(
                run(
                    name, [sys.executable, str(ROOT / "bench" / f"{name}.py"), *flags], args.timeout
                )
            )
    total = time.perf_counter() - started

    failed = [r.name for r in runs if r.returncode != 0]
    lines = [
        "# Herald bench report",
        "",
        "Generated by `make bench-report` (bench/report.py) from the benches' own output: each",
        "bench prints its figures beside a baseline measured in the same run, and is quoted here",
        "as it printed them. The sizes are small, so the whole report runs in minutes; each",
        "bench's command shows its size, and its docstring the size its figures were designed at.",
        "Figures from a busy machine are noisy: compare a figure with its own baseline, not with",
        "another report's.",
        "",
        f"- Date: {started_at:%Y-%m-%d %H:%M} UTC; the report took {total / 60:.1f} minutes",
        f"- Commit: {commit()}",
        *head,
        f"- Anchor: {shown([str(args.anchor)])}"
        + ("" if args.anchor.exists() else " (not found: left out)"),
        f"- Failed: {', '.join(failed)}" if failed else "- Failed: none",
        "",
        "The anchor is a minimal PostgreSQL claim loop (no Herald): the ceiling the delivery",
        "queue's figures are read against.",
        "",
    ]
    for result in runs:
        lines += section(result)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out} in {total:.0f} s")


if __name__ == "__main__":
    main()
