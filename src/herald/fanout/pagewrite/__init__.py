"""The fan-out's set-based batch write: one statement per page of the audience (queries.py)."""
