"""The demo school (tenant `demo`) that `herald dev` loads, and the dev-mode runner."""
