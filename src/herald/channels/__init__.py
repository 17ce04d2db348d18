"""Channel providers: one module per provider, all speaking the Provider protocol of base.py."""
