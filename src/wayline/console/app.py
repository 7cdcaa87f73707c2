"""The console on the admin API's app: its routes under /console and its static files
(CSS and htmx, shipped in this package: nothing is fetched from elsewhere)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.staticfiles import StaticFiles

from wayline.core.errors import NotFound
from wayline.registry.secrets import SecretBox

from . import auth, customer, operator
from .jobs import JobsWatch
from .pages import PREFIX, ConsoleRoute
from .session import Sessions

STATIC = Path(__file__).parent / "static"

# Included last: a console URL no page answers is a console page too, not the API's JSON.
unknown = APIRouter(prefix=PREFIX, route_class=ConsoleRoute, include_in_schema=False)


@unknown.api_route("/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"])
def no_such_page(request: Request, path: str):
    raise NotFound(f"the console has no page at {request.url.path}")


def install(app: FastAPI) -> FastAPI:
    """Add the console to an app made by ``wayline.api.app.create_app`` (it uses that app's
    settings, database and endpoint service)."""
    settings = app.state.settings
    box: SecretBox = app.state.secret_box
    # Derived from the registry's encryption key, so every instance signs sessions alike.
    app.state.console_sessions = Sessions(box.fingerprint(b"wayline console sessions"), settings.console.session_ttl_s)
    app.state.console_jobs = JobsWatch(settings.console.metrics_timeout_s)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC), name="console-static")
    for router in (auth.router, customer.router, operator.router, unknown):
        app.include_router(router)
    return app


__all__ = ["install"]
