"""Issue 12's inbox at its size: 10,000,000 delivered in-app rows for 1,000,000 people, measured
through the real HTTP API at 16 concurrent clients.

    .venv/bin/python bench/inbox.py [--people 1000000] [--rows 10000000] [...bench/api.py options]

bench/api.py's `--large` mode with these sizes as defaults (any of its options may follow and
win): people, events, recipients and deliveries generated server-side with INSERT … SELECT
generate_series (about seven minutes on a 2-core machine), 20 "heavy" staff with 5,000 rows each
and 30 % read; then p50/p99 and requests/s of the list's first page, a page 50 cursors deep, the
unread count and mark-read, beside /healthz in the same run, and EXPLAIN (ANALYZE, BUFFERS) of
each statement. Never part of the test run.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import api

DEFAULTS = ["--large", "--people", "1000000", "--rows", "10000000", "--requests", "4000"]

if __name__ == "__main__":
    sys.argv[1:] = DEFAULTS + sys.argv[1:]
    api.main()
