"""Console sessions: a signed, HTTP-only, SameSite cookie holding the session's token and
its CSRF token, and a row on the server for each signed-in session.

The cookie never carries the API key, nor even its id: every request looks the token up
(by its hash) in ``console_sessions`` and turns the key id found there into a caller
through the registry. Signing out deletes the row, so a copy of the cookie is worth
nothing afterwards; a key revoked after sign-in stops working at once too.
Every session, signed in or not, has a CSRF token: each form sends it back in a hidden
field, and a POST whose field does not match the cookie's is refused (the sign-in form
included, so no other site can sign a browser in with the attacker's key).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from wayline.core.errors import Forbidden
from wayline.registry.models import ConsoleSession

COOKIE = "wayline_console"
CSRF_FIELD = "csrf"
# Expired session rows deleted per sign-in: enough to keep up, never a long delete.
PURGE_BATCH = 100


class CsrfRefused(Forbidden):
    """A console form came without the session's CSRF token."""


@dataclass(frozen=True)
class SessionData:
    csrf: str
    token: str | None = None
    """A signed-in session's token (its row on the server); None before sign-in."""

    @classmethod
    def fresh(cls, token: str | None = None) -> SessionData:
        return cls(csrf=secrets.token_urlsafe(32), token=token)


def _hash(token: str) -> str:
    # A leaked table holds no usable token.
    return hashlib.sha256(token.encode()).hexdigest()


def check_csrf(session: SessionData | None, presented: str | None) -> None:
    if session is None or not presented or not hmac.compare_digest(presented.encode(), session.csrf.encode()):
        raise CsrfRefused("this form's CSRF token is missing or out of date: reload the page and submit it again")


class Sessions:
    """Signs and reads session cookies, and keeps the signed-in sessions' rows; ``secret``
    must be the same on every console instance."""

    def __init__(self, secret: str, ttl_s: int) -> None:
        self._serializer = URLSafeTimedSerializer(secret, salt="wayline-console-session")
        self.ttl_s = ttl_s

    def dump(self, data: SessionData) -> str:
        return self._serializer.dumps({"c": data.csrf, "t": data.token})

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
        token = raw.get("t")
        return SessionData(csrf=raw["c"], token=token if isinstance(token, str) else None)

    def open(self, session: Session, key_id: str) -> SessionData:
        """A new signed-in session for ``key_id``, with a new CSRF token (one seen before
        sign-in is worth nothing after); a few expired sessions are deleted on the way."""
        now = datetime.now(timezone.utc)
        expired = select(ConsoleSession.token_hash).where(ConsoleSession.expires_at <= now).limit(
            PURGE_BATCH).with_for_update(skip_locked=True)
        session.execute(delete(ConsoleSession).where(ConsoleSession.token_hash.in_(expired)))
        token = secrets.token_urlsafe(32)
        session.add(ConsoleSession(token_hash=_hash(token), api_key_id=key_id,
                                   expires_at=now + timedelta(seconds=self.ttl_s)))
        return SessionData.fresh(token)

    @staticmethod
    def key_of(session: Session, data: SessionData) -> str | None:
        """The key id of a signed-in session; None once it was signed out or expired."""
        if data.token is None:
            return None
        row = session.get(ConsoleSession, _hash(data.token))
        if row is None or row.expires_at <= datetime.now(timezone.utc):
            return None
        return row.api_key_id

    @staticmethod
    def close(session: Session, data: SessionData) -> None:
        """End a signed-in session on the server (signing out)."""
        if data.token is not None:
            session.execute(delete(ConsoleSession).where(ConsoleSession.token_hash == _hash(data.token)))


__all__ = ["COOKIE", "CSRF_FIELD", "PURGE_BATCH", "CsrfRefused", "SessionData", "Sessions", "check_csrf"]
