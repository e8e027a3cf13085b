"""Command-line tools of gpu-tenancy: offline render, policy check, GPU planning, validation, bench."""
