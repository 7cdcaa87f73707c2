"""What every command shares: the console, errors shown as one readable line, and the
live view of a running job."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console, RenderableType
from rich.live import Live

from wayline.core.errors import WaylineError
from wayline.pipelines.job import Job

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


def watch(job: Job, view: Callable[[], RenderableType], what: str,
          stop_when: Callable[[], bool] = lambda: False) -> None:
    """Show ``view`` twice a second while ``job`` runs, until Ctrl-C or ``stop_when``; then stop it."""
    try:
        with Live(view(), console=console, refresh_per_second=2) as live:
            while job.isActive and not stop_when():
                live.update(view())
                # Not awaitTermination: Ctrl-C must land outside a call into the JVM.
                time.sleep(0.5)
        failure = job.exception()
        if failure is not None:
            raise WaylineError(f"the {what} failed: {failure}")
    except KeyboardInterrupt:
        console.print("stopping…")
    finally:
        job.stop()


__all__ = ["console", "guarded", "watch"]
