"""`wayline publish`, `wayline poll` (through the messaging API's client) and `wayline serve
messaging`; `wayline serve` alone runs the admin and messaging APIs in one process."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.markup import escape

from wayline.cli.output import console, guarded
from wayline.core.errors import RejectedInput
from wayline.core.settings import Settings
from wayline.messaging.client import MessagingClient, MessagingError
from wayline.messaging.wire import PublishOut

Url = Annotated[str | None, typer.Option(help="the messaging API; default: messaging.host and .port from the settings")]
Key = Annotated[str, typer.Option(envvar="WAYLINE_API_KEY", help="an API key (or set WAYLINE_API_KEY)")]


def _client(url: str | None, key: str) -> MessagingClient:
    if url is None:
        settings = Settings()
        url = f"http://{settings.messaging.host}:{settings.messaging.port}"
    return MessagingClient(url, key)


def _events(text: bytes) -> tuple[list[Any], list[str]]:
    """The events of a JSON event, a JSON array of events, or JSON lines, and where each is in
    the input ("line 7" in JSON lines, "event 7 of the input" in a JSON document), for messages."""
    try:
        decoded = orjson.loads(text)
    except orjson.JSONDecodeError as whole:
        return _json_lines(text, whole)
    events = decoded if isinstance(decoded, list) else [decoded]
    return events, [f"event {n} of the input" for n in range(1, len(events) + 1)]


def _json_lines(text: bytes, whole: orjson.JSONDecodeError) -> tuple[list[Any], list[str]]:
    events, places = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            events.append(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            if not events:
                raise RejectedInput(f"the input is neither JSON nor JSON lines: {whole}") from whole
            raise RejectedInput(f"line {number} is not JSON: {exc}") from exc
        places.append(f"line {number}")
    return events, places


def _refusals(client: MessagingClient, topic: str, batch: list[Any], idempotency_key: str | None,
              transaction: str | None) -> list[tuple[int, str]]:
    """The index and reason of each refused event of the batch; an answer refusing them all is an
    error answer carrying the same results."""
    try:
        answer = client.publish(topic, batch, transaction=transaction, idempotency_key=idempotency_key)
    except MessagingError as exc:
        if not isinstance(exc.body, dict) or "results" not in exc.body:
            raise
        answer = PublishOut.model_validate(exc.body)
    return [(result.index, result.error.message) for result in answer.results if result.error is not None]


def _placed(message: str, index: int, place: str) -> str:
    """The server names an event by its index in the request ("event 50 (id 'x'): …"); the user
    finds it by its place in the input."""
    named = f"event {index}"
    return place + message.removeprefix(named) if message.startswith(named) else f"{place}: {message}"


@guarded
def publish(
    topic: Annotated[str, typer.Argument(help="the topic to publish to")],
    source: Annotated[Path, typer.Argument(help="a file of events (JSON, JSON array or JSON lines); - for stdin")],
    url: Url = None,
    key: Key = "",
    batch_size: Annotated[int, typer.Option(min=1, help="events per request")] = 100,
    idempotency_key: Annotated[str | None, typer.Option(
        help="a retry with the same key writes nothing twice; batch n uses <key>-<n>")] = None,
    transactional: Annotated[bool, typer.Option(
        help="all batches in one transaction: all are written or none (it stops at the first refused event)")
    ] = False,
) -> None:
    """Publish CloudEvents through the messaging API; prints where each went or why it was refused,
    naming each refused event by its line (JSON lines) or its position (a JSON array)."""
    events, places = _events(sys.stdin.buffer.read() if str(source) == "-" else source.read_bytes())
    refused = 0
    with _client(url, key) as client:
        transaction = client.begin().id if transactional else None
        try:
            for n, start in enumerate(range(0, len(events), batch_size)):
                refusals = _refusals(client, topic, events[start:start + batch_size],
                                     f"{idempotency_key}-{n}" if idempotency_key else None, transaction)
                for index, message in refusals:
                    console.print(f"[red]refused[/] {escape(_placed(message, index, places[start + index]))}")
                refused += len(refusals)
                if refusals and transaction is not None:
                    break
        except BaseException:
            if transaction is not None:
                client.abort(transaction)
            raise
        if transaction is not None:
            if refused:
                client.abort(transaction)
                console.print(f"published 0 of {len(events)} events to {topic}: the transaction was aborted")
                raise typer.Exit(1)
            client.commit(transaction)
    console.print(f"published {len(events) - refused} of {len(events)} events to {topic}")
    if refused:
        raise typer.Exit(1)


@guarded
def poll(
    topic: Annotated[str, typer.Argument(help="the topic to read")],
    url: Url = None,
    key: Key = "",
    cursor: Annotated[str | None, typer.Option(help="go on from a cursor an earlier poll printed")] = None,
    start: Annotated[str, typer.Option(help="without a cursor: earliest, latest or an RFC 3339 time")] = "earliest",
    limit: Annotated[int, typer.Option(min=1, help="records per request")] = 100,
    follow: Annotated[bool, typer.Option(help="keep polling (long-polls of --wait seconds) until Ctrl-C")] = False,
    wait_s: Annotated[float, typer.Option("--wait", min=0, help="seconds a request waits for a record")] = 10.0,
) -> None:
    """Print a topic's committed records as JSON lines (stdout), then the next cursor (stderr)."""
    with _client(url, key) as client:
        while True:
            page = client.poll(topic, cursor=cursor, start=None if cursor else start, limit=limit,
                               wait_s=wait_s if follow else 0)
            for record in page.records:
                sys.stdout.write(orjson.dumps(record.model_dump(exclude_none=True)).decode() + "\n")
            sys.stdout.flush()
            cursor = page.next_cursor
            if not follow and len(page.records) < limit:
                break
    typer.echo(f"next cursor: {cursor}", err=True)


@guarded
def serve_messaging(
    host: Annotated[str | None, typer.Option(help="default: messaging.host from the settings")] = None,
    port: Annotated[int | None, typer.Option(help="default: messaging.port from the settings")] = None,
) -> None:
    """Serve the messaging API alone (OpenAPI at /docs). Stateless: run as many as you like."""
    import uvicorn

    from wayline.api.messaging import create_messaging_app
    from wayline.registry.db import Database, make_engine

    settings = Settings()
    uvicorn.run(create_messaging_app(settings, Database(make_engine(settings.postgres_dsn()))),
                host=host or settings.messaging.host, port=port or settings.messaging.port)


def serve_all(ctx: typer.Context) -> None:
    """Without a sub-command: the admin and messaging APIs in one process, on api.host and api.port."""
    if ctx.invoked_subcommand is not None:
        return
    guarded(_serve_all)()


def _serve_all() -> None:
    import uvicorn

    from wayline.api.app import create_app
    from wayline.api.messaging import mount
    from wayline.registry.db import Database, make_engine

    settings = Settings()
    database = Database(make_engine(settings.postgres_dsn()))
    app = create_app(settings, database)
    mount(app, settings, database)
    uvicorn.run(app, host=settings.api.host, port=settings.api.port)


def register(app: typer.Typer, serve_app: typer.Typer) -> None:
    app.command()(publish)
    app.command()(poll)
    serve_app.command("messaging")(serve_messaging)
    serve_app.callback(invoke_without_command=True)(serve_all)


__all__ = ["poll", "publish", "register", "serve_all", "serve_messaging"]
