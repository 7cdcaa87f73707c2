"""The transport contract, against real HTTP servers on 127.0.0.1, for every HTTP client
``delivery.http_client`` can choose: each test runs once with aiohttp and once with pyreqwest."""

import asyncio
import socket

import pytest
from aiohttp import web

from tests.delivery.servers import Recorder, serve
from wayline.core.settings import HttpClientName
from wayline.delivery.transports.aiohttp import AiohttpTransport
from wayline.delivery.transports.base import Endpoint, Failure, FailureKind, HttpSettings, Request, Response
from wayline.delivery.transports.factory import transport_for
from wayline.delivery.transports.pyreqwest import ReqwestTransport
from wayline.registry.urls import AddressPolicy

TRANSPORTS = {"aiohttp": AiohttpTransport, "pyreqwest": ReqwestTransport}


@pytest.fixture(params=list(TRANSPORTS))
def client(request: pytest.FixtureRequest) -> HttpClientName:
    return request.param


def loopback(client: HttpClientName) -> AiohttpTransport | ReqwestTransport:
    return transport_for(["127.0.0.1/32"], client)()


def post(url: str, body: bytes = b"{}", timeout_s: float = 5.0) -> Request:
    return Request(Endpoint("ep_test", url, timeout_s=timeout_s), body, {"content-type": "application/json"})


def test_a_response_comes_back_with_lower_case_headers_and_a_capped_body(client: HttpClientName) -> None:
    recorder = Recorder()

    async def hook(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=202, body=b"x" * 10_000, headers={"X-Receipt": "r1"})

    settings = HttpSettings(max_response_bytes=1000, allowed=AddressPolicy.of(["127.0.0.1"]))

    async def scenario() -> None:
        async with serve({"/hook": hook}) as base, TRANSPORTS[client](settings) as http:
            result = await http.send(post(f"{base}/hook", b'{"a":1}'))
        assert isinstance(result, Response)
        assert (result.status, result.ok, result.headers["x-receipt"], len(result.body)) == (202, True, "r1", 1000)
        [received] = recorder.requests
        assert received.body == b'{"a":1}'
        assert received.headers["content-type"] == "application/json"
        assert received.headers["user-agent"].startswith("Wayline")

    asyncio.run(scenario())


def test_connections_are_kept_alive_and_reused(client: HttpClientName) -> None:
    peers: list[object] = []

    async def hook(request: web.Request) -> web.Response:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        return web.Response(status=200)

    async def scenario() -> None:
        async with serve({"/hook": hook}) as base, loopback(client) as http:
            for _ in range(5):
                assert isinstance(await http.send(post(f"{base}/hook")), Response)

    asyncio.run(scenario())
    assert len(peers) == 5 and len(set(peers)) == 1


@pytest.mark.parametrize("chunked", [False, True], ids=["declared-length", "chunked"])
def test_a_body_comes_back_whole_whether_its_length_is_declared_or_chunked(client: HttpClientName,
                                                                         chunked: bool) -> None:
    peers: list[object] = []

    async def hook(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        if not chunked:
            return web.Response(status=200, body=b"accepted: 3 parts")
        response = web.StreamResponse(status=200)
        response.enable_chunked_encoding()
        await response.prepare(request)
        for part in (b"accepted: ", b"3 ", b"parts"):
            await response.write(part)
        await response.write_eof()
        return response

    async def scenario() -> list[Response]:
        async with serve({"/hook": hook}) as base, loopback(client) as http:
            return [await http.send(post(f"{base}/hook")) for _ in range(3)]

    results = asyncio.run(scenario())
    assert [(r.status, r.body) for r in results if isinstance(r, Response)] == [(200, b"accepted: 3 parts")] * 3
    assert all(("content-length" in r.headers) is not chunked for r in results if isinstance(r, Response))
    assert len(peers) == 3 and len(set(peers)) == 1


def test_redirects_are_not_followed(client: HttpClientName) -> None:
    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound("/elsewhere")

    async def scenario() -> None:
        async with serve({"/hook": moved}) as base, loopback(client) as http:
            result = await http.send(post(f"{base}/hook"))
        assert isinstance(result, Response) and result.status == 302

    asyncio.run(scenario())


def test_cookies_from_one_endpoint_never_reach_another(client: HttpClientName) -> None:
    recorder = Recorder()

    async def sets_cookie(request: web.Request) -> web.Response:
        response = web.Response(status=200)
        response.set_cookie("session", "secret-of-customer-a")
        return response

    async def hook(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=200)

    async def scenario() -> None:
        async with serve({"/a": sets_cookie, "/b": hook}) as base, loopback(client) as http:
            await http.send(post(f"{base}/a"))
            await http.send(post(f"{base}/b"))

    asyncio.run(scenario())
    assert "cookie" not in recorder.requests[0].headers


def test_a_slow_endpoint_times_out_at_its_own_timeout(client: HttpClientName) -> None:
    async def hangs(request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.Response(status=200)

    async def scenario() -> None:
        async with serve({"/hook": hangs}) as base, loopback(client) as http:
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
def test_network_problems_come_back_as_failures(url: str, kind: FailureKind, client: HttpClientName) -> None:
    async def scenario() -> None:
        async with loopback(client) as http:
            result = await http.send(post(url))
        assert isinstance(result, Failure) and result.kind is kind and result.detail

    asyncio.run(scenario())


def test_sending_outside_the_context_is_a_programming_error(client: HttpClientName) -> None:
    with pytest.raises(RuntimeError):
        asyncio.run(TRANSPORTS[client]().send(post("http://127.0.0.1:1/")))


def refusing_sink(recorder: Recorder):
    async def sink(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=204)

    return sink


@pytest.mark.parametrize(
    ("allow_list", "host"),
    [(["127.0.0.1/32"], "127.0.0.1"), (["127.0.0.0/8", "::1"], "localhost"), (["LocalHost"], "localhost")],
)
def test_an_address_the_allow_list_admits_is_delivered_to(
    allow_list: list[str], host: str, client: HttpClientName
) -> None:
    recorder = Recorder()

    async def scenario() -> None:
        async with serve({"/hook": refusing_sink(recorder)}) as base, transport_for(allow_list, client)() as http:
            result = await http.send(post(base.replace("127.0.0.1", host) + "/hook"))
        assert isinstance(result, Response) and result.status == 204

    asyncio.run(scenario())
    assert len(recorder.requests) == 1


def test_the_host_header_names_the_urls_host_not_the_address_it_was_checked_at(client: HttpClientName) -> None:
    """The pyreqwest transport pins a host name to the address it checked: the request
    must still name the host, as a virtual host or a TLS certificate expects."""
    recorder = Recorder()

    async def scenario() -> None:
        async with serve({"/hook": refusing_sink(recorder)}) as base, transport_for(["127.0.0.1/32"], client)() as http:
            named = base.replace("127.0.0.1", "localhost")
            for _ in range(2):
                assert isinstance(await http.send(post(f"{named}/hook")), Response)
            port = base.rsplit(":", 1)[1]

        assert [r.headers["host"] for r in recorder.requests] == [f"localhost:{port}"] * 2

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("localhost", "loopback"),  # a name: refused by the resolver, at connect time
        ("0x7f.0.0.1", "loopback"),  # a legacy numeric form, which only the resolver reads as an address
        ("[::ffff:127.0.0.1]", "loopback: it embeds 127.0.0.1"),
        ("[64:ff9b::7f00:1]", "loopback: it embeds 127.0.0.1"),
        ("[2002:7f00:1::]", "loopback: it embeds 127.0.0.1"),
        ("[::1]", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("169.254.169.254", "link-local"),
    ],
)
def test_a_non_public_address_is_refused_at_send_time_and_nothing_reaches_it(
    host: str, reason: str, client: HttpClientName
) -> None:
    recorder = Recorder()

    async def scenario() -> None:
        async with serve({"/hook": refusing_sink(recorder)}) as base, TRANSPORTS[client]() as http:
            port = base.rsplit(":", 1)[1]
            result = await http.send(post(f"http://{host}:{port}/hook"))
        assert isinstance(result, Failure) and result.kind is FailureKind.ADDRESS_REFUSED
        assert f"({reason}" in result.detail and "registry.url_allow_list" in result.detail

    asyncio.run(scenario())
    assert recorder.requests == []


def test_an_allow_list_narrowed_since_the_endpoint_was_created_still_refuses(client: HttpClientName) -> None:
    """The allow-list admits 10.0.0.0/8, not loopback: the host's own answer decides, not its history."""
    recorder = Recorder()

    async def scenario() -> None:
        async with serve({"/hook": refusing_sink(recorder)}) as base, transport_for(["10.0.0.0/8"], client)() as http:
            result = await http.send(post(base.replace("127.0.0.1", "localhost") + "/hook"))
        assert isinstance(result, Failure) and result.kind is FailureKind.ADDRESS_REFUSED
        assert result.detail.startswith("localhost resolves to ")

    asyncio.run(scenario())
    assert recorder.requests == []


def test_a_redirect_to_a_loopback_address_is_not_followed(client: HttpClientName) -> None:
    recorder = Recorder()

    async def scenario() -> None:
        async with serve({"/sink": refusing_sink(recorder)}) as sink:
            async def moved(request: web.Request) -> web.Response:
                raise web.HTTPTemporaryRedirect(sink.replace("127.0.0.1", "localhost") + "/sink")

            allow = transport_for(["127.0.0.0/8", "::1", "localhost"], client)
            async with serve({"/hook": moved}) as base, allow() as http:
                result = await http.send(post(f"{base}/hook"))
        assert isinstance(result, Response) and result.status == 307

    asyncio.run(scenario())
    assert recorder.requests == [], "the redirect's target was never asked"
