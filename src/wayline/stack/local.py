"""`wayline up / down / status`: the local stack as one unit, recorded in the state file."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from wayline.core.errors import StackError
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.stack.kafka import start_broker, stop_broker
from wayline.stack.postgres import start_postgres, stop_postgres
from wayline.stack.process import is_alive


@dataclass(frozen=True)
class StackState:
    kafka_bootstrap: str
    kafka_pid: int
    postgres_dsn: str
    postgres_pid: int
    started_at: float

    @property
    def alive(self) -> dict[str, bool]:
        return {"kafka": is_alive(self.kafka_pid), "postgres": is_alive(self.postgres_pid)}


def read_state(settings: Settings) -> StackState | None:
    try:
        return StackState(**json.loads(settings.stack_file.read_text()))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, TypeError) as exc:
        raise StackError(f"{settings.stack_file} is unreadable ({exc}); remove it and run `wayline up`") from exc


def up(settings: Settings) -> StackState:
    """Start the broker and the database (unless already running) and create Wayline's topics."""
    state = read_state(settings)
    if state is not None and all(state.alive.values()):
        return state
    if state is not None:
        down(settings)  # half-alive leftovers from a crash: stop them, then start cleanly
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    broker = start_broker(settings)
    try:
        database = start_postgres(settings)
    except BaseException:
        stop_broker(broker.pid, settings)
        raise
    state = StackState(
        kafka_bootstrap=broker.bootstrap,
        kafka_pid=broker.pid,
        postgres_dsn=database.dsn,
        postgres_pid=database.pid,
        started_at=time.time(),
    )
    settings.stack_file.write_text(json.dumps(asdict(state), indent=2))
    ensure_topics(state.kafka_bootstrap, [settings.kafka.quarantine_topic], settings.kafka.topic_partitions)
    return state


def down(settings: Settings) -> None:
    state = read_state(settings)
    if state is None:
        return
    errors: list[str] = []
    for stop, pid in ((stop_broker, state.kafka_pid), (stop_postgres, state.postgres_pid)):
        try:
            stop(pid, settings)
        except StackError as exc:
            errors.append(str(exc))
    if errors:
        raise StackError("; ".join(errors))
    settings.stack_file.unlink(missing_ok=True)


__all__ = ["StackState", "down", "read_state", "up"]
