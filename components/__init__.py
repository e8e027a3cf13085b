"""Pulumi ComponentResources of gpu-tenancy, one concept per module."""
