"""The aiohttp transport against real HTTP servers on 127.0.0.1."""

import asyncio
import socket

import pytest
from aiohttp import web

from tests.delivery.servers import Recorder, serve
from wayline.delivery.http_client import AiohttpTransport, HttpSettings
from wayline.delivery.transport import Endpoint, Failure, FailureKind, Request, Response


def post(url: str, body: bytes = b"{}", timeout_s: float = 5.0) -> Request:
    return Request(Endpoint("ep_test", url, timeout_s=timeout_s), body, {"content-type": "application/json"})


def test_a_response_comes_back_with_lower_case_headers_and_a_capped_body() -> None:
    recorder = Recorder()

    async def hook(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=202, body=b"x" * 10_000, headers={"X-Receipt": "r1"})

    async def scenario() -> None:
        async with serve({"/hook": hook}) as base, AiohttpTransport(HttpSettings(max_response_bytes=1000)) as http:
            result = await http.send(post(f"{base}/hook", b'{"a":1}'))
        assert isinstance(result, Response)
        assert (result.status, result.ok, result.headers["x-receipt"], len(result.body)) == (202, True, "r1", 1000)
        [received] = recorder.requests
        assert received.body == b'{"a":1}'
        assert received.headers["content-type"] == "application/json"
        assert received.headers["user-agent"].startswith("Wayline")

    asyncio.run(scenario())


def test_connections_are_kept_alive_and_reused() -> None:
    peers: list[object] = []

    async def hook(request: web.Request) -> web.Response:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        return web.Response(status=200)

    async def scenario() -> None:
        async with serve({"/hook": hook}) as base, AiohttpTransport() as http:
            for _ in range(5):
                assert isinstance(await http.send(post(f"{base}/hook")), Response)

    asyncio.run(scenario())
    assert len(peers) == 5 and len(set(peers)) == 1


def test_redirects_are_not_followed() -> None:
    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound("/elsewhere")

    async def scenario() -> None:
        async with serve({"/hook": moved}) as base, AiohttpTransport() as http:
            result = await http.send(post(f"{base}/hook"))
        assert isinstance(result, Response) and result.status == 302

    asyncio.run(scenario())


def test_cookies_from_one_endpoint_never_reach_another() -> None:
    recorder = Recorder()

    async def sets_cookie(request: web.Request) -> web.Response:
        response = web.Response(status=200)
        response.set_cookie("session", "secret-of-customer-a")
        return response

    async def hook(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=200)

    async def scenario() -> None:
        async with serve({"/a": sets_cookie, "/b": hook}) as base, AiohttpTransport() as http:
            await http.send(post(f"{base}/a"))
            await http.send(post(f"{base}/b"))

    asyncio.run(scenario())
    assert "cookie" not in recorder.requests[0].headers


def test_a_slow_endpoint_times_out_at_its_own_timeout() -> None:
    async def hangs(request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.Response(status=200)

    async def scenario() -> None:
        async with serve({"/hook": hangs}) as base, AiohttpTransport() as http:
            result = await http.send(post(f"{base}/hook", timeout_s=0.2))
        assert isinstance(result, Failure) and result.kind is FailureKind.TIMEOUT
        assert 0.2 <= result.elapsed_s < 2

    asyncio.run(scenario())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        (f"http://127.0.0.1:{free_port()}/hook", FailureKind.CONNECTION),
        ("not a url", FailureKind.INVALID_REQUEST),
        ("ftp://127.0.0.1/hook", FailureKind.INVALID_REQUEST),
    ],
)
def test_network_problems_come_back_as_failures(url: str, kind: FailureKind) -> None:
    async def scenario() -> None:
        async with AiohttpTransport() as http:
            result = await http.send(post(url))
        assert isinstance(result, Failure) and result.kind is kind and result.detail

    asyncio.run(scenario())


def test_sending_outside_the_context_is_a_programming_error() -> None:
    with pytest.raises(RuntimeError):
        asyncio.run(AiohttpTransport().send(post("http://127.0.0.1:1/")))
