"""Sign-in with an API key, and sign-out."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from wayline.core.errors import Unauthorized
from wayline.registry import api_key

from .forms import text
from .pages import (
    PREFIX,
    ConsoleRoute,
    FormDep,
    SignInFirst,
    back_to,
    current_session,
    database_of,
    render,
    sessions,
    set_session,
    viewer,
)
from .session import SessionData

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute, include_in_schema=False)


def _safe_next(target: str | None) -> str | None:
    # Only a console path: never a redirect to another site.
    return target if target and target.startswith(f"{PREFIX}/") and not target.startswith("//") else None


@router.get("/sign-in", response_class=HTMLResponse)
def sign_in_page(request: Request, next: str | None = None) -> HTMLResponse:
    return render(request, "sign_in.html", None, next=_safe_next(next) or "", problem=None)


@router.post("/sign-in")
def sign_in(request: Request, form: FormDep):
    before = current_session(request)
    try:
        with database_of(request).transaction() as session:
            caller = api_key.authenticate(session, text(form, "key") or "")
            if before is not None:
                sessions(request).close(session, before)  # signing in again ends the session it replaces
            signed_in = sessions(request).open(session, caller.key_id)
    except Unauthorized as exc:
        return render(request, "sign_in.html", None, status=401, next=text(form, "next") or "", problem=str(exc))
    home = "/customers" if caller.is_admin else "/endpoints"
    response = RedirectResponse(_safe_next(text(form, "next")) or f"{PREFIX}{home}", status_code=303)
    set_session(request, response, signed_in)
    return response


@router.post("/sign-out")
def sign_out(request: Request, form: FormDep):
    ending = current_session(request)
    if ending is not None:
        # On the server: the cookie the browser forgets may have been copied.
        with database_of(request).transaction() as session:
            sessions(request).close(session, ending)
    response = back_to("/sign-in")
    set_session(request, response, SessionData.fresh())
    return response


@router.get("", include_in_schema=False)
@router.get("/", include_in_schema=False)
def home(request: Request):
    try:
        who = viewer(request)
    except SignInFirst:
        return back_to("/sign-in")
    return back_to("/customers" if who.caller.is_admin else "/endpoints")


__all__ = ["router"]
