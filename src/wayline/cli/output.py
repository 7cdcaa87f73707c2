"""What every command shares: the console, errors shown as one readable line, and the
live view of a running job."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console, RenderableType
from rich.live import Live

from wayline.core.errors import WaylineError
from wayline.core.settings import Settings
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


def job_log_file(settings: Settings, job: str) -> Path:
    """Where a job's standard error goes while its live view has the terminal
    (:func:`wayline.stack.logs.job_log`); said once, before the view starts."""
    log_file = (settings.state_dir / "logs" / f"{job}.log").resolve()
    console.print(f"{job} log: {log_file}", soft_wrap=True)
    return log_file


def watch(job: Job, view: Callable[[], RenderableType], what: str,
          stop_when: Callable[[], bool] = lambda: False) -> None:
    """Show ``view`` twice a second while ``job`` runs, until Ctrl-C or ``stop_when``; then stop it."""
    try:
        # stderr stays where job_log points it (the job's log file), not above the view.
        with Live(view(), console=console, refresh_per_second=2, redirect_stderr=False) as live:
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


__all__ = ["console", "guarded", "job_log_file", "watch"]
