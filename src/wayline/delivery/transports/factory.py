"""The one place that picks an HTTP transport by name (``delivery.http_client``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING

from wayline.core.settings import DEFAULT_HTTP_CLIENT, HttpClientName
from wayline.delivery.transports.base import HttpSettings
from wayline.registry.urls import AddressPolicy

if TYPE_CHECKING:
    from wayline.delivery.transports.aiohttp import AiohttpTransport
    from wayline.delivery.transports.pyreqwest import ReqwestTransport


def transport_for(
    allow_list: Iterable[str], client: HttpClientName = DEFAULT_HTTP_CLIENT
) -> Callable[[], AiohttpTransport | ReqwestTransport]:
    """A factory of ``client`` transports (``delivery.http_client``) that reach non-public
    addresses only as ``allow_list`` admits."""
    settings = HttpSettings(allowed=AddressPolicy.of(allow_list))
    # Each implementation is imported when asked for, so a process loads only the HTTP
    # library it sends with.
    if client == "aiohttp":
        from wayline.delivery.transports.aiohttp import AiohttpTransport

        return partial(AiohttpTransport, settings)
    from wayline.delivery.transports.pyreqwest import ReqwestTransport

    return partial(ReqwestTransport, settings)


__all__ = ["transport_for"]
