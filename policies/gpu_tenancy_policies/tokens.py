"""bootstrap-token-hygiene: bootstrap token Secrets expire and only admit nodes.

A bootstrap token is a credential the API server accepts from anyone who holds it. kubeadm's join
needs exactly the usages ``authentication`` and ``signing`` and the node-token group; any other
group or usage lets the token do more than join, and a token without an expiration never stops
working (k8s.io/cluster-bootstrap/token/api). Messages never quote the token secret.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Iterable, Iterator
from typing import Any

from gpu_tenancy import kubeadm

from . import kinds
from .stack import ResourceView
from .values import UNKNOWN, is_known

USAGE_PREFIX = "usage-bootstrap-"


def _token_data(resource: ResourceView) -> dict[str, Any] | None:
    """The Secret's data as the API server assembles it: ``data`` decoded, then ``stringData`` over it."""
    merged: dict[str, Any] = {}
    data = resource.get("data", default={})
    string_data = resource.get("stringData", default={})
    if not is_known(data) or not is_known(string_data):
        return None  # a preview: the token and its expiry are made by the same update
    for key, value in (data if isinstance(data, dict) else {}).items():
        try:
            merged[key] = base64.b64decode(value, validate=True).decode() if isinstance(value, str) else value
        except (binascii.Error, UnicodeDecodeError):
            merged[key] = value
    merged.update(string_data if isinstance(string_data, dict) else {})
    return merged


def check(resource: ResourceView, allowed_groups: Iterable[str]) -> Iterator[str]:
    if resource.type != kinds.SECRET or resource.get("type") != kubeadm.BOOTSTRAP_SECRET_TYPE:
        return
    data = _token_data(resource)
    if data is None:
        return
    expiration = data.get("expiration")
    if not isinstance(expiration, str) or not expiration.strip():
        yield "the bootstrap token has no expiration, so it admits nodes forever"
    else:
        try:
            parsed = datetime.datetime.fromisoformat(expiration.strip())
            if parsed.tzinfo is None:
                raise ValueError("no time zone")
        except ValueError:
            yield f"the bootstrap token's expiration {expiration!r} is not an RFC 3339 time; the API server would ignore it"
    for key, value in sorted(data.items()):
        if not key.startswith(USAGE_PREFIX):
            continue
        usage = key.removeprefix(USAGE_PREFIX)
        # The API server and the bootstrap signer honour a usage only when it is exactly "true"
        # (bootstrapsecretutil.GetData(...) != "true"): "True" grants nothing.
        if usage not in kubeadm.TOKEN_USAGES and value == "true":
            yield f"the bootstrap token allows usage {usage!r}; a join needs only {', '.join(kubeadm.TOKEN_USAGES)}"
    groups = data.get("auth-extra-groups")
    allowed = set(allowed_groups)
    if isinstance(groups, str) and groups.strip():
        for group in (item.strip() for item in groups.split(",")):
            if group and group not in allowed:
                yield f"the bootstrap token puts its holder in group {group!r}; only {', '.join(sorted(allowed))} may be granted"
    token_id, token_secret = data.get("token-id"), data.get("token-secret")
    if not isinstance(token_id, str) or not kubeadm.TOKEN_ID_PATTERN.match(token_id):
        yield "the bootstrap token's token-id is not [a-z0-9]{6}"
    else:
        name = resource.get("metadata", "name")
        if isinstance(name, str) and name != kubeadm.bootstrap_secret_name(token_id):
            yield f"the Secret is named {name!r}, not {kubeadm.bootstrap_secret_name(token_id)!r}; the API server ignores it"
    if not isinstance(token_secret, str) or not kubeadm.TOKEN_SECRET_PATTERN.match(token_secret):
        yield "the bootstrap token's token-secret is not [a-z0-9]{16}"
    if resource.get("metadata", "namespace") not in (UNKNOWN, "kube-system"):
        yield "bootstrap token Secrets work only in kube-system"
