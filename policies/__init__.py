"""The gpu-tenancy isolation policy pack (a regular package, so no other top-level ``policies`` shadows it)."""
