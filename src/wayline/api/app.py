"""The admin API: customers, API keys, tenants, event types, endpoints, subscriptions, rules and
the reference tables join rules read.

Run with `wayline serve admin`; OpenAPI at `/docs`. Stateless: any number of instances
can serve the same registry.
"""

from __future__ import annotations

from fastapi import FastAPI

from wayline.api import errors
from wayline.api.bodies import BodyLimit
from wayline.api.routers import (
    api_keys,
    attempts,
    catalog,
    customers,
    dead_letters,
    endpoint_actions,
    endpoints,
    reconciliations,
    reference_tables,
    rules,
    subscriptions,
)
from wayline.core.settings import Settings
from wayline.registry.db import Database
from wayline.registry.endpoint import EndpointService
from wayline.registry.secrets import SecretBox
from wayline.registry.urls import Resolver, resolve


def create_app(settings: Settings, database: Database, resolver: Resolver = resolve) -> FastAPI:
    app = FastAPI(title="Wayline admin API", version="1", description=__doc__)
    app.add_middleware(BodyLimit, limit=settings.api.max_request_bytes)
    app.state.settings = settings
    app.state.database = database
    app.state.secret_box = SecretBox.from_settings(settings)
    app.state.endpoints = EndpointService.from_settings(settings, resolver, app.state.secret_box)
    errors.install(app)
    for router in (customers.router, api_keys.router, catalog.router, endpoints.router, subscriptions.router,
                   rules.router, reference_tables.router, endpoint_actions.router, attempts.router, dead_letters.router):
        app.include_router(router)
    app.include_router(reconciliations.router)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, int | str]:
        return {"status": "ok", "registry_version": database.current_version()}

    return app


__all__ = ["create_app"]
