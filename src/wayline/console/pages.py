"""What every console page needs: the signed-in caller, the CSRF check, rendering, and
errors turned into pages (the JSON API's error handlers answer JSON; people get HTML)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import Depends, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError
from starlette.datastructures import FormData

from wayline.api.errors import STATUS
from wayline.core.errors import RejectedInput, Unauthorized
from wayline.core.settings import Settings
from wayline.registry import api_key, customer
from wayline.registry.access import Caller
from wayline.registry.db import Database

from .formats import duration, http_status, time_span
from .session import COOKIE, CSRF_FIELD, SessionData, Sessions, check_csrf

PREFIX = "/console"
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")


def link(path: str, query: dict[str, str | None] | None = None, **more: str | None) -> str:
    """A console URL with the query's non-blank values (a pager keeps the filters it pages)."""
    kept = {k: v for k, v in {**(query or {}), **more}.items() if v}
    return f"{PREFIX}{path}" + (f"?{urlencode(kept)}" if kept else "")


templates.env.globals["link"] = link
templates.env.filters.update(duration=duration, http_status=http_status, time_span=time_span)


class SignInFirst(Unauthorized):
    """No signed-in session (or its key was revoked): the browser is sent to sign in."""


@dataclass(frozen=True)
class Viewer:
    """Who is looking (``name``: the customer's, or "operator"), and the CSRF token their forms carry."""

    caller: Caller
    session: SessionData
    name: str

    @property
    def csrf(self) -> str:
        return self.session.csrf


def sessions(request: Request) -> Sessions:
    return request.app.state.console_sessions


def current_session(request: Request) -> SessionData | None:
    return sessions(request).load(request.cookies.get(COOKIE))


def viewer(request: Request) -> Viewer:
    session = current_session(request)
    if session is None or session.token is None:
        raise SignInFirst("not signed in")
    db: Database = request.app.state.database
    try:
        with db.transaction() as s:
            key_id = sessions(request).key_of(s, session)
            if key_id is None:
                raise SignInFirst("signed out, or the sign-in expired")
            caller = api_key.caller_of(s, key_id)
            name = "operator" if caller.customer_id is None else customer.get(s, caller, caller.customer_id).name
    except Unauthorized as exc:
        raise SignInFirst(str(exc)) from exc
    return Viewer(caller, session, name)


async def form_of(request: Request) -> FormData:
    """The POSTed form, once its CSRF token matched the session's."""
    form = await request.form()
    presented = form.get(CSRF_FIELD)
    check_csrf(current_session(request), presented if isinstance(presented, str) else None)
    return form


ViewerDep = Annotated[Viewer, Depends(viewer)]
FormDep = Annotated[FormData, Depends(form_of)]


def settings_of(request: Request) -> Settings:
    return request.app.state.settings


def database_of(request: Request) -> Database:
    return request.app.state.database


def render(request: Request, template: str, viewer: Viewer | None, status: int = 200, **context: Any) -> HTMLResponse:
    session = viewer.session if viewer else current_session(request)
    # The sign-in form needs a CSRF token before anyone has signed in: a session without a key.
    fresh = session is None
    session = session or SessionData.fresh()
    response = templates.TemplateResponse(request, template, {
        "viewer": viewer, "csrf": session.csrf, "prefix": PREFIX, **context,
    }, status_code=status)
    if fresh:
        set_session(request, response, session)
    return response


def set_session(request: Request, response: Response, data: SessionData) -> None:
    response.set_cookie(COOKIE, sessions(request).dump(data), max_age=sessions(request).ttl_s, path=PREFIX,
                        httponly=True, samesite="strict", secure=request.url.scheme == "https")


def back_to(path: str, **query: str | None) -> RedirectResponse:
    """After a form: see the page it changed (Post/Redirect/Get)."""
    return RedirectResponse(link(path, query), status_code=303)


def _error_page(request: Request, status: int, message: str) -> HTMLResponse:
    try:
        shown = viewer(request)
    except SignInFirst:
        shown = None
    return render(request, "error.html", shown, status=status, status_code=status, message=message)


def _validation_message(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
                     if e["loc"] else e["msg"] for e in exc.errors())


class ConsoleRoute(APIRoute):
    """A console route: errors become pages with the API's status codes, and a visitor who
    has not signed in is sent to sign in first."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def as_page(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInFirst:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"{PREFIX}/sign-in?next={quote(target)}", status_code=303)
            except RejectedInput as exc:
                kind = next((k for k in STATUS if isinstance(exc, k)), None)
                return _error_page(request, STATUS[kind] if kind else 422, str(exc))
            except ValidationError as exc:
                return _error_page(request, 422, _validation_message(exc))

        return as_page


__all__ = [
    "ConsoleRoute", "FormDep", "PREFIX", "SignInFirst", "Viewer", "ViewerDep", "back_to", "current_session",
    "database_of", "form_of", "link", "render", "sessions", "set_session", "settings_of", "templates", "viewer",
]
