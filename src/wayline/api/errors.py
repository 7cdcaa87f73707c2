"""Every error answer is JSON `{"error": {"code": ..., "message": ...}}` with a fitting status.

That holds for Wayline's own errors, for request validation, for bodies that are not JSON,
for routes that do not exist and for values PostgreSQL cannot store (NUL characters).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, OperationalError
from starlette.exceptions import HTTPException

from wayline.core.errors import (
    Conflict,
    Forbidden,
    NotFound,
    RejectedInput,
    RetryLater,
    TooLarge,
    TooMany,
    Unauthorized,
)

STATUS = {Unauthorized: 401, Forbidden: 403, NotFound: 404, Conflict: 409, TooLarge: 413, TooMany: 429}
CODES = {Unauthorized: "unauthorized", Forbidden: "forbidden", NotFound: "not_found", Conflict: "conflict",
         TooLarge: "too_large", TooMany: "rate_limited"}
HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
# A transient failure (the registry database unreachable): ask the client to come back.
RETRY_AFTER_S = 5
NUL_MESSAGE = "text may not contain NUL characters (\\u0000), in the body, the path or the query"


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def _validation_message(exc: RequestValidationError) -> str:
    problems = []
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            position = next((part for part in error.get("loc", ()) if isinstance(part, int)), None)
            reason = (error.get("ctx") or {}).get("error", "JSON decode error")
            problems.append(f"the body is not valid JSON: {reason} at character {position}")
            continue
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems)


def install(app: FastAPI) -> None:
    @app.exception_handler(RejectedInput)
    async def rejected(_request: Request, exc: RejectedInput) -> JSONResponse:
        kind = next((k for k in STATUS if isinstance(exc, k)), None)
        status = STATUS.get(kind, 422) if kind else 422
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse(error_body(CODES.get(kind, "invalid") if kind else "invalid", str(exc)), status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body("invalid", _validation_message(exc)), 422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # FastAPI answers 400 for any body it could not decode; these are the ones that nest past any use.
        if isinstance(exc.__cause__, RejectedInput):
            return await rejected(request, exc.__cause__)
        if isinstance(exc.__cause__, RecursionError):
            return JSONResponse(error_body("invalid", "the body is not valid JSON: it nests too deeply"), 422)
        if exc.status_code == 404 and exc.detail == "Not Found":
            message = f"no route {request.method} {request.url.path}; the API is described at /docs"
        else:
            message = str(exc.detail)
        code = HTTP_CODES.get(exc.status_code, "invalid" if exc.status_code < 500 else "error")
        return JSONResponse(error_body(code, message), exc.status_code, headers=exc.headers)

    @app.exception_handler(DataError)
    async def unstorable(_request: Request, exc: DataError) -> JSONResponse:
        # PostgreSQL refuses NUL in text and \u0000 in JSONB; whatever carried it, the caller can remove it.
        text = str(exc.orig)
        message = NUL_MESSAGE if "0x00" in text or "\\u0000" in text else f"a value cannot be stored: {text.splitlines()[0]}"
        return JSONResponse(error_body("invalid", message), 422)

    @app.exception_handler(RetryLater)
    async def unavailable(_request: Request, exc: RetryLater) -> JSONResponse:
        return _unavailable(str(exc))

    @app.exception_handler(OperationalError)
    async def unreachable(_request: Request, exc: OperationalError) -> JSONResponse:
        # Reads outside a transaction (GET /health) meet the driver's error untranslated.
        return _unavailable(f"the registry database is unreachable: {str(exc.orig).splitlines()[0]}")


def _unavailable(reason: str) -> JSONResponse:
    return JSONResponse(error_body("unavailable", f"{reason}; try again shortly"), 503,
                        headers={"Retry-After": str(RETRY_AFTER_S)})


__all__ = ["error_body", "install"]
