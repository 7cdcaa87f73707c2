"""Every error answer is JSON `{"error": {"code": ..., "message": ...}}` with a fitting status."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from wayline.core.errors import Conflict, Forbidden, NotFound, RejectedInput, RetryLater, Unauthorized

STATUS = {Unauthorized: 401, Forbidden: 403, NotFound: 404, Conflict: 409}
CODES = {Unauthorized: "unauthorized", Forbidden: "forbidden", NotFound: "not_found", Conflict: "conflict"}


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def install(app: FastAPI) -> None:
    @app.exception_handler(RejectedInput)
    async def rejected(_request: Request, exc: RejectedInput) -> JSONResponse:
        kind = next((k for k in STATUS if isinstance(exc, k)), None)
        status = STATUS.get(kind, 422) if kind else 422
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse(error_body(CODES.get(kind, "invalid") if kind else "invalid", str(exc)), status, headers=headers)

    @app.exception_handler(RetryLater)
    async def unavailable(_request: Request, exc: RetryLater) -> JSONResponse:
        # Transient (the registry database is unreachable): the same request may succeed later.
        return JSONResponse(error_body("unavailable", str(exc)), 503)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for error in exc.errors():
            where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
            message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
            problems.append(f"{where}: {message}" if where else message)
        return JSONResponse(error_body("invalid", "; ".join(problems)), 422)


__all__ = ["error_body", "install"]
