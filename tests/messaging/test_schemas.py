"""Event types' schemas as publishing reads them, from the real registry."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from sqlalchemy import text

from wayline.messaging.schemas import SchemaCatalog
from wayline.registry import catalog
from wayline.registry.access import ADMIN

pytestmark = pytest.mark.integration


def test_types_without_a_schema_check_nothing_and_break_no_other_type(database, unique: str) -> None:
    schema = {"type": "object", "required": ["amount"]}
    with database.transaction() as session:
        catalog.create_event_type(session, ADMIN, catalog.EventTypeIn(name=f"com.{unique}.plain"))
        catalog.create_event_type(session, ADMIN, catalog.EventTypeIn(name=f"com.{unique}.checked", json_schema=schema))
        # A row from before "no schema" was stored as SQL NULL holds the JSON value null.
        catalog.create_event_type(session, ADMIN, catalog.EventTypeIn(name=f"com.{unique}.legacy"))
        session.execute(text("UPDATE event_types SET json_schema = 'null'::jsonb WHERE name = :name"),
                        {"name": f"com.{unique}.legacy"})
        stored = session.execute(text("SELECT json_schema IS NULL FROM event_types WHERE name = :name"),
                                 {"name": f"com.{unique}.plain"}).scalar_one()
    assert stored is True
    schemas = SchemaCatalog(database, max_age_s=0)
    assert schemas.problem(f"com.{unique}.plain", {"any": 1}) is None
    assert schemas.problem(f"com.{unique}.legacy", {"any": 1}) is None
    assert schemas.problem(f"com.{unique}.checked", {}) == 'data: "amount" is a required property'
    assert schemas.problem(f"com.{unique}.checked", {"amount": 3}) is None


def test_a_stored_schema_that_does_not_compile_refuses_its_events_and_fetches_nothing(database, unique: str) -> None:
    """A schema stored before registration checked schemas, with a $ref to a URL: publishing
    never fetches it (that would reach past registry.url_allow_list), and says what to fix."""
    fetched = []

    class Count(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fetched.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"type": "object"}')

    server = HTTPServer(("127.0.0.1", 0), Count)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    name = f"com.{unique}.remote"
    try:
        with database.transaction() as session:
            catalog.create_event_type(session, ADMIN, catalog.EventTypeIn(name=name))
            session.execute(text("UPDATE event_types SET json_schema = CAST(:schema AS jsonb) WHERE name = :name"),
                            {"name": name, "schema": f'{{"$ref": "http://127.0.0.1:{server.server_port}/s.json"}}'})
        problem = SchemaCatalog(database, max_age_s=0).problem(name, {"any": 1})
    finally:
        server.shutdown()
    assert fetched == []
    assert problem is not None and "Wayline fetches no schema" in problem and f"PATCH /event-types/{name}" in problem
