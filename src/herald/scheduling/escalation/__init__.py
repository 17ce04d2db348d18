"""Channel escalation per kind: the scheduler decides each due step once (docs/escalation.md)."""
