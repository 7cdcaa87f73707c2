"""What every command shares: the console, and errors shown as one readable line."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console

from wayline.core.errors import WaylineError

console = Console()
F = TypeVar("F", bound=Callable[..., Any])


def guarded(command: F) -> F:
    """Show Wayline's errors (and invalid input) as one line instead of a traceback."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except WaylineError as exc:
            console.print(f"[bold red]error:[/] {exc}")
            raise typer.Exit(1) from exc
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"] else e["msg"] for e in exc.errors()
            )
            console.print(f"[bold red]error:[/] {problems}")
            raise typer.Exit(1) from exc

    return run  # type: ignore[return-value]


__all__ = ["console", "guarded"]
