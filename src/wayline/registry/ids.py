"""Prefixed, time-ordered ids: the kind is visible (`ep_`, `sub_`) and ids sort by creation."""

from __future__ import annotations

import base64
import os
import time

PREFIXES = {
    "customer": "cus",
    "api_key": "key",
    "endpoint": "ep",
    "secret": "whs",
    "subscription": "sub",
    "dead_letter": "dl",
    "test_event": "evt_test",
    "rule": "rule",
    "topic_grant": "tg",
}


def new_id(kind: str) -> str:
    # 48 bits of milliseconds then 80 random bits, base32 without padding (like a ULID):
    # cursor pagination can order by id and get creation order.
    raw = int(time.time() * 1000).to_bytes(6, "big") + os.urandom(10)
    return f"{PREFIXES[kind]}_{base64.b32encode(raw).decode().rstrip('=').lower()}"


__all__ = ["PREFIXES", "new_id"]
