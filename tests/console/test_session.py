"""Console session cookies and CSRF tokens, without a server."""

from __future__ import annotations

import pytest

from wayline.console.session import CsrfRefused, SessionData, Sessions, check_csrf


def test_a_session_round_trips_and_a_changed_or_foreign_cookie_reads_as_none() -> None:
    sessions = Sessions("secret-1", ttl_s=60)
    data = SessionData.fresh("key_1")
    cookie = sessions.dump(data)
    assert sessions.load(cookie) == data
    assert "key_1" not in cookie.split(".")[-1]  # the signature, at least, is no plain text
    assert sessions.load(cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB")) is None
    assert Sessions("secret-2", ttl_s=60).load(cookie) is None
    assert sessions.load(None) is None and sessions.load("") is None


def test_an_expired_session_reads_as_none() -> None:
    cookie = Sessions("s", ttl_s=60).dump(SessionData.fresh("key_1"))
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
