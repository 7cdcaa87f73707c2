"""Console session cookies and CSRF tokens, and the sessions' rows in the real PostgreSQL."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from wayline.console.session import CsrfRefused, SessionData, Sessions, check_csrf
from wayline.registry import api_key
from wayline.registry.access import ADMIN
from wayline.registry.models import ConsoleSession


def test_a_session_round_trips_and_a_changed_or_foreign_cookie_reads_as_none() -> None:
    sessions = Sessions("secret-1", ttl_s=60)
    data = SessionData.fresh("token_1")
    cookie = sessions.dump(data)
    assert sessions.load(cookie) == data
    assert "token_1" not in cookie.split(".")[-1]  # the signature, at least, is no plain text
    assert sessions.load(cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB")) is None
    assert Sessions("secret-2", ttl_s=60).load(cookie) is None
    assert sessions.load(None) is None and sessions.load("") is None


def test_an_expired_session_reads_as_none() -> None:
    cookie = Sessions("s", ttl_s=60).dump(SessionData.fresh("token_1"))
    assert Sessions("s", ttl_s=-1).load(cookie) is None


def test_every_session_gets_its_own_csrf_token_and_only_it_passes() -> None:
    one, two = SessionData.fresh(), SessionData.fresh()
    assert one.csrf != two.csrf and len(one.csrf) >= 32
    check_csrf(one, one.csrf)
    for presented in (two.csrf, "", None):
        with pytest.raises(CsrfRefused, match="CSRF token is missing or out of date"):
            check_csrf(one, presented)
    with pytest.raises(CsrfRefused):
        check_csrf(None, one.csrf)


def sha256(token: str | None) -> str:
    return hashlib.sha256((token or "").encode()).hexdigest()


@pytest.mark.integration
def test_a_session_lives_on_the_server_until_signed_out_or_expired(database, unique: str) -> None:
    sessions = Sessions("s", ttl_s=3600)
    with database.transaction() as s:
        key = api_key.create(s, ADMIN, api_key.ApiKeyIn(name=f"sessions-{unique}", scope="admin"))
        kept, ended, stale = (sessions.open(s, key.id) for _ in range(3))
    assert len({kept.token, ended.token, stale.token}) == 3 and len({kept.csrf, ended.csrf}) == 2
    with database.transaction() as s:
        assert key.id == sessions.key_of(s, kept) == sessions.key_of(s, ended)
        assert sessions.key_of(s, SessionData.fresh()) is None  # not signed in
        assert sessions.key_of(s, SessionData.fresh("a-token-never-issued")) is None
        sessions.close(s, ended)
        # The rows keep hashes: the table alone signs nobody in.
        hashes = set(s.scalars(select(ConsoleSession.token_hash)))
        assert kept.token not in hashes and sha256(kept.token) in hashes
    with database.transaction() as s:
        assert sessions.key_of(s, ended) is None and sessions.key_of(s, kept) == key.id
        s.execute(update(ConsoleSession).where(ConsoleSession.token_hash == sha256(stale.token))
                  .values(expires_at=datetime.now(UTC) - timedelta(seconds=1)))
    with database.transaction() as s:
        assert sessions.key_of(s, stale) is None
        sessions.open(s, key.id)  # a sign-in deletes expired sessions on its way
    with database.transaction() as s:
        left = set(s.scalars(select(ConsoleSession.token_hash).where(ConsoleSession.api_key_id == key.id)))
        assert sha256(stale.token) not in left and sha256(kept.token) in left and len(left) == 2
