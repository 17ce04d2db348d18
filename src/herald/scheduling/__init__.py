"""Time: the scheduler's lease, reminder schedules and their occurrences (DESIGN.md §5.2)."""
