"""The trace: "why didn't this parent get it?" in one call (issue 13)."""
