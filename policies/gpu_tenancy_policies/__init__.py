"""The gpu-tenancy isolation policy pack, as importable, testable Python.

``POLICIES`` are the CrossGuard policy objects; policies/__main__.py hands them to ``PolicyPack``
and ``tools.policycheck`` runs them offline against a render.
"""

from .pack import CONFIG_SCHEMAS, PACK_ENFORCEMENT, PACK_NAME, POLICIES, POLICY_NAMES, default_level, settings

__all__ = ["CONFIG_SCHEMAS", "PACK_ENFORCEMENT", "PACK_NAME", "POLICIES", "POLICY_NAMES", "default_level", "settings"]
