"""Endpoint signing secrets in the Standard Webhooks ``whsec_`` format.

Below both the registry (which generates, stores and rotates them) and delivery (which
signs with them), so neither imports the other for it.
"""

from __future__ import annotations

import base64
import binascii
import secrets as _random
from dataclasses import dataclass, field

from wayline.core.errors import RejectedInput

SECRET_PREFIX = "whsec_"
# The spec's bounds for a symmetric secret: at least 192 bits, at most 512.
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64
GENERATED_SECRET_BYTES = 32


@dataclass(frozen=True, slots=True)
class Secret:
    """One endpoint signing secret. Its repr never shows the key."""

    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not MIN_SECRET_BYTES <= len(self.key) <= MAX_SECRET_BYTES:
            raise RejectedInput(
                f"a signing secret must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, "
                f"not {len(self.key)}"
            )

    @classmethod
    def parse(cls, text: str) -> Secret:
        """Read a ``whsec_<base64>`` secret as customers see it."""
        if not text.startswith(SECRET_PREFIX):
            raise RejectedInput(f"a signing secret must start with {SECRET_PREFIX!r}")
        try:
            key = base64.b64decode(text[len(SECRET_PREFIX):], validate=True)
        except binascii.Error as exc:
            raise RejectedInput("a signing secret must be base64 after its prefix") from exc
        return cls(key)

    @classmethod
    def generate(cls) -> Secret:
        return cls(_random.token_bytes(GENERATED_SECRET_BYTES))

    @property
    def text(self) -> str:
        """The ``whsec_`` form, to show the customer once and to store encrypted."""
        return SECRET_PREFIX + base64.b64encode(self.key).decode("ascii")


__all__ = ["GENERATED_SECRET_BYTES", "MAX_SECRET_BYTES", "MIN_SECRET_BYTES", "SECRET_PREFIX", "Secret"]
