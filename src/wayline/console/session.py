"""Console sessions: a signed, HTTP-only, SameSite cookie holding the signed-in key's id and
the session's CSRF token.

The cookie never carries the API key itself, only its id; every request turns the id back
into a caller through the registry, so a key revoked after sign-in stops working at once.
Every session, signed in or not, has a CSRF token: each form sends it back in a hidden
field, and a POST whose field does not match the cookie's is refused (the sign-in form
included, so no other site can sign a browser in with the attacker's key).
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer

from wayline.core.errors import Forbidden

COOKIE = "wayline_console"
CSRF_FIELD = "csrf"


class CsrfRefused(Forbidden):
    """A console form came without the session's CSRF token."""


@dataclass(frozen=True)
class SessionData:
    csrf: str
    key_id: str | None = None

    @classmethod
    def fresh(cls, key_id: str | None = None) -> SessionData:
        return cls(csrf=secrets.token_urlsafe(32), key_id=key_id)



def check_csrf(session: SessionData | None, presented: str | None) -> None:
    if session is None or not presented or not hmac.compare_digest(presented.encode(), session.csrf.encode()):
        raise CsrfRefused("this form's CSRF token is missing or out of date: reload the page and submit it again")


class Sessions:
    """Signs and reads session cookies; ``secret`` must be the same on every console instance."""

    def __init__(self, secret: str, ttl_s: int) -> None:
        self._serializer = URLSafeTimedSerializer(secret, salt="wayline-console-session")
        self.ttl_s = ttl_s

    def dump(self, data: SessionData) -> str:
        return self._serializer.dumps({"c": data.csrf, "k": data.key_id})

    def load(self, cookie: str | None) -> SessionData | None:
        """The session in ``cookie``; None when there is none, it was tampered with or it expired."""
        if not cookie:
            return None
        try:
            raw = self._serializer.loads(cookie, max_age=self.ttl_s)
        except BadSignature:
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("c"), str):
            return None
        key_id = raw.get("k")
        return SessionData(csrf=raw["c"], key_id=key_id if isinstance(key_id, str) else None)


__all__ = ["COOKIE", "CSRF_FIELD", "CsrfRefused", "SessionData", "Sessions", "check_csrf"]
