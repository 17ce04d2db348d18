"""The audit trail: one `audit_record` row per admin mutation (R-ADMIN-6..8, R-SEC-18)."""
