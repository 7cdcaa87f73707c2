"""A typed Python client for the messaging API, sync (`MessagingClient`) and async
(`AsyncMessagingClient`), on httpx.

    with MessagingClient("http://127.0.0.1:8081", api_key) as client:
        client.publish("events.orders", [event, event])
        page = client.poll("events.orders", limit=500)
        page = client.poll("events.orders", cursor=page.next_cursor)

Both clients send the same requests (each built once, by a `_Call` function below); an error answer raises
`MessagingError` with its status, code and message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
import orjson
from pydantic import TypeAdapter

from wayline.core.errors import WaylineError
from wayline.messaging.wire import GrantOut, PollOut, PublishOut, TopicList, TopicOut, TransactionOut

T = TypeVar("T")
Events = Mapping[str, Any] | Sequence[Mapping[str, Any]]


class MessagingError(WaylineError):
    def __init__(self, status: int, code: str, message: str, body: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body


@dataclass(frozen=True)
class _Call(Generic[T]):
    method: str
    path: str
    parse: TypeAdapter[T] | None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes | None = None

    def request(self) -> dict[str, Any]:
        return {"method": self.method, "url": self.path, "headers": self.headers, "content": self.content,
                "params": {k: v for k, v in self.params.items() if v is not None}}

    def answer(self, response: httpx.Response) -> T:
        if response.status_code >= 400:
            try:
                body = response.json()
                error = body["error"]
                raise MessagingError(response.status_code, error["code"], error["message"], body)
            except (ValueError, KeyError, TypeError):
                raise MessagingError(response.status_code, "http", response.text) from None
        if self.parse is None:
            return None  # type: ignore[return-value]
        return self.parse.validate_json(response.content)


_PUBLISH, _POLL = TypeAdapter(PublishOut), TypeAdapter(PollOut)
_TRANSACTION, _TOPIC, _TOPICS = TypeAdapter(TransactionOut), TypeAdapter(TopicOut), TypeAdapter(TopicList)
_GRANT = TypeAdapter(GrantOut)


def _publish(topic: str, events: Events, idempotency_key: str | None, transaction: str | None) -> _Call[PublishOut]:
    path = f"/topics/{topic}/events" if transaction is None else f"/transactions/{transaction}/topics/{topic}/events"
    headers = {"Content-Type": "application/json"}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    body = events if isinstance(events, Mapping) else list(events)
    return _Call("POST", path, _PUBLISH, headers=headers, content=orjson.dumps(body))


def _poll(topic: str, cursor: str | None, start: str | None, limit: int | None, max_bytes: int | None,
          wait_s: float | None) -> _Call[PollOut]:
    return _Call("GET", f"/topics/{topic}/events", _POLL, params={
        "cursor": cursor, "start": start, "limit": limit, "max_bytes": max_bytes, "wait_s": wait_s,
    })


def _begin() -> _Call[TransactionOut]:
    return _Call("POST", "/transactions", _TRANSACTION)


def _finish(transaction: str, how: str) -> _Call[TransactionOut]:
    return _Call("POST", f"/transactions/{transaction}/{how}", _TRANSACTION)


def _create_topic(name: str, partitions: int, retention_ms: int | None) -> _Call[TopicOut]:
    return _Call("POST", "/topics", _TOPIC, headers={"Content-Type": "application/json"},
                 content=orjson.dumps({"name": name, "partitions": partitions, "retention_ms": retention_ms}))


def _describe_topic(name: str) -> _Call[TopicOut]:
    return _Call("GET", f"/topics/{name}", _TOPIC)


def _list_topics() -> _Call[TopicList]:
    return _Call("GET", "/topics", _TOPICS)


def _delete_topic(name: str) -> _Call[None]:
    return _Call("DELETE", f"/topics/{name}", None)


def _grant(api_key_id: str, pattern: str, actions: Sequence[str]) -> _Call[GrantOut]:
    return _Call("POST", "/topic-grants", _GRANT, headers={"Content-Type": "application/json"},
                 content=orjson.dumps({"api_key_id": api_key_id, "pattern": pattern, "actions": list(actions)}))


def _http_options(base_url: str, api_key: str, timeout_s: float) -> dict[str, Any]:
    return {"base_url": base_url, "headers": {"Authorization": f"Bearer {api_key}"}, "timeout": timeout_s}


class MessagingClient:
    def __init__(self, base_url: str, api_key: str, timeout_s: float = 60.0) -> None:
        self._http = httpx.Client(**_http_options(base_url, api_key, timeout_s))

    def _send(self, call: _Call[T]) -> T:
        return call.answer(self._http.request(**call.request()))

    def publish(self, topic: str, events: Events, *, idempotency_key: str | None = None,
                transaction: str | None = None) -> PublishOut:
        """One event (a mapping) or a batch (a sequence); a 207 answer returns, each result says how it went."""
        return self._send(_publish(topic, events, idempotency_key, transaction))

    def poll(self, topic: str, *, cursor: str | None = None, start: str | None = None, limit: int | None = None,
             max_bytes: int | None = None, wait_s: float | None = None) -> PollOut:
        return self._send(_poll(topic, cursor, start, limit, max_bytes, wait_s))

    def begin(self) -> TransactionOut:
        return self._send(_begin())

    def commit(self, transaction: str) -> TransactionOut:
        return self._send(_finish(transaction, "commit"))

    def abort(self, transaction: str) -> TransactionOut:
        return self._send(_finish(transaction, "abort"))

    def create_topic(self, name: str, partitions: int = 2, retention_ms: int | None = None) -> TopicOut:
        return self._send(_create_topic(name, partitions, retention_ms))

    def describe_topic(self, name: str) -> TopicOut:
        return self._send(_describe_topic(name))

    def list_topics(self) -> list[str]:
        return self._send(_list_topics()).data

    def delete_topic(self, name: str) -> None:
        self._send(_delete_topic(name))

    def grant(self, api_key_id: str, pattern: str, actions: Sequence[str]) -> GrantOut:
        return self._send(_grant(api_key_id, pattern, actions))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MessagingClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class AsyncMessagingClient:
    def __init__(self, base_url: str, api_key: str, timeout_s: float = 60.0) -> None:
        self._http = httpx.AsyncClient(**_http_options(base_url, api_key, timeout_s))

    async def _send(self, call: _Call[T]) -> T:
        return call.answer(await self._http.request(**call.request()))

    async def publish(self, topic: str, events: Events, *, idempotency_key: str | None = None,
                      transaction: str | None = None) -> PublishOut:
        return await self._send(_publish(topic, events, idempotency_key, transaction))

    async def poll(self, topic: str, *, cursor: str | None = None, start: str | None = None, limit: int | None = None,
                   max_bytes: int | None = None, wait_s: float | None = None) -> PollOut:
        return await self._send(_poll(topic, cursor, start, limit, max_bytes, wait_s))

    async def begin(self) -> TransactionOut:
        return await self._send(_begin())

    async def commit(self, transaction: str) -> TransactionOut:
        return await self._send(_finish(transaction, "commit"))

    async def abort(self, transaction: str) -> TransactionOut:
        return await self._send(_finish(transaction, "abort"))

    async def create_topic(self, name: str, partitions: int = 2, retention_ms: int | None = None) -> TopicOut:
        return await self._send(_create_topic(name, partitions, retention_ms))

    async def describe_topic(self, name: str) -> TopicOut:
        return await self._send(_describe_topic(name))

    async def list_topics(self) -> list[str]:
        return (await self._send(_list_topics())).data

    async def delete_topic(self, name: str) -> None:
        await self._send(_delete_topic(name))

    async def grant(self, api_key_id: str, pattern: str, actions: Sequence[str]) -> GrantOut:
        return await self._send(_grant(api_key_id, pattern, actions))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMessagingClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()


__all__ = ["AsyncMessagingClient", "Events", "MessagingClient", "MessagingError"]
