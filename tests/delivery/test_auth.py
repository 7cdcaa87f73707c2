"""Endpoint auth headers; OAuth2 against a real token server on 127.0.0.1."""

import asyncio
import base64
from urllib.parse import unquote_plus

import pytest
from aiohttp import web

from tests.delivery.servers import Recorder, loopback_transport, serve
from wayline.core.errors import RejectedInput, RetryLater
from wayline.delivery.auth import BasicAuth, BearerAuth, ClientCredentials, OAuth2ClientCredentials, TokenError
from wayline.delivery.dispatch import Dispatcher
from wayline.delivery.transports.base import Endpoint, Request, Response

CLIENT_ID = "wayline client:1"  # a space and a colon: both must survive form-encoding
CLIENT_SECRET = "s3cr=t&more"


def test_basic_and_bearer_headers() -> None:
    basic = asyncio.run(BasicAuth("alice", "pa:ss").headers())
    assert base64.b64decode(basic["authorization"].removeprefix("Basic ")) == b"alice:pa:ss"
    assert asyncio.run(BearerAuth("t0k").headers()) == {"authorization": "Bearer t0k"}
    assert "pa:ss" not in repr(BasicAuth("alice", "pa:ss")) and "t0k" not in repr(BearerAuth("t0k"))
    with pytest.raises(RejectedInput):
        BasicAuth("al:ice", "x")


class TokenServer:
    """A client-credentials token endpoint that checks what it is sent and counts fetches."""

    def __init__(self, expires_in: object = 3600) -> None:
        self.fetches = 0
        self.expires_in = expires_in
        self.refuse = False

    async def token(self, request: web.Request) -> web.Response:
        self.fetches += 1
        if self.refuse:
            return web.json_response({"error": "invalid_client", "error_description": "unknown client"}, status=401)
        user, _, password = base64.b64decode(request.headers["Authorization"].split()[1]).decode().partition(":")
        form = await request.post()
        assert (unquote_plus(user), unquote_plus(password)) == (CLIENT_ID, CLIENT_SECRET)
        assert request.content_type == "application/x-www-form-urlencoded"
        assert (form["grant_type"], form["scope"]) == ("client_credentials", "events:write")
        body: dict[str, object] = {"access_token": f"tok-{self.fetches}", "token_type": "bearer"}
        if self.expires_in is not None:
            body["expires_in"] = self.expires_in
        return web.json_response(body)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def credentials(base: str, **timings: float) -> ClientCredentials:
    return ClientCredentials(
        token_url=f"{base}/token", client_id=CLIENT_ID, client_secret=CLIENT_SECRET, scope="events:write", **timings
    )


def test_one_token_serves_many_requests_until_shortly_before_it_expires() -> None:
    tokens = TokenServer(expires_in=3600)
    recorder = Recorder()
    clock = Clock()

    async def hook(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=200)

    async def scenario() -> None:
        async with serve({"/token": tokens.token, "/hook": hook}) as base, loopback_transport() as http:
            auth = OAuth2ClientCredentials(credentials(base, refresh_margin_s=30), http, clock)
            endpoint = Endpoint("ep_1", f"{base}/hook", auth=auth)
            dispatcher = Dispatcher(http)
            requests = [Request(endpoint, b"{}", {}) for _ in range(50)]
            results = await dispatcher.deliver_all(requests, deadline_s=10)
            assert all(isinstance(r, Response) and r.status == 200 for r in results)
            assert tokens.fetches == 1, "concurrent requests share one fetch"

            clock.now = 3600 - 31
            await dispatcher.deliver_all(requests[:5], deadline_s=10)
            assert tokens.fetches == 1
            clock.now = 3600 - 30  # inside the refresh margin: fetch anew before expiry
            await dispatcher.deliver_all(requests[:5], deadline_s=10)
            assert tokens.fetches == 2

    asyncio.run(scenario())
    seen = [r.headers["authorization"] for r in recorder.requests]
    assert seen == ["Bearer tok-1"] * 55 + ["Bearer tok-2"] * 5


def test_a_token_without_expires_in_gets_the_default_lifetime() -> None:
    tokens = TokenServer(expires_in=None)
    clock = Clock()

    async def scenario() -> None:
        async with serve({"/token": tokens.token}) as base, loopback_transport() as http:
            auth = OAuth2ClientCredentials(credentials(base, default_lifetime_s=100, refresh_margin_s=10), http, clock)
            assert await auth.token() == "tok-1"
            clock.now = 89
            assert await auth.token() == "tok-1"
            clock.now = 90
            assert await auth.token() == "tok-2"

    asyncio.run(scenario())


def test_a_refused_fetch_fails_fast_for_a_while_then_tries_again() -> None:
    tokens = TokenServer()
    tokens.refuse = True
    clock = Clock()

    async def scenario() -> None:
        async with serve({"/token": tokens.token}) as base, loopback_transport() as http:
            auth = OAuth2ClientCredentials(credentials(base, fetch_backoff_s=5), http, clock)
            with pytest.raises(TokenError, match=r"refused the client credentials \(401\): unknown client"):
                await auth.headers()
            clock.now = 4.9
            with pytest.raises(RetryLater):
                await auth.headers()
            assert tokens.fetches == 1
            tokens.refuse = False
            clock.now = 5
            assert await auth.headers() == {"authorization": "Bearer tok-2"}

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("answer", "status", "message"),
    [
        (b"<html>oops</html>", 200, "not JSON"),
        (b'{"token_type": "bearer"}', 200, "without an access_token"),
        (b'{"access_token": "t", "token_type": "mac"}', 200, "only bearer"),
        (b'{"access_token": "t", "token_type": "Bearer", "expires_in": -1}', 200, "invalid expires_in"),
        (b'{"error": "server_error"}', 500, r"\(500\): server_error"),
    ],
)
def test_unusable_token_answers_are_token_errors(answer: bytes, status: int, message: str) -> None:
    async def token(request: web.Request) -> web.Response:
        return web.Response(status=status, body=answer, content_type="application/json")

    async def scenario() -> None:
        async with serve({"/token": token}) as base, loopback_transport() as http:
            with pytest.raises(TokenError, match=message):
                await OAuth2ClientCredentials(credentials(base), http).token()

    asyncio.run(scenario())


def test_an_unreachable_token_server_is_a_token_error() -> None:
    async def scenario() -> None:
        async with loopback_transport() as http:
            auth = OAuth2ClientCredentials(credentials("http://127.0.0.1:1"), http)
            with pytest.raises(TokenError, match="token endpoint"):
                await auth.token()
        assert CLIENT_SECRET not in repr(auth)

    asyncio.run(scenario())
