"""Serving a job's Prometheus metrics from its driver: ``/metrics`` on a daemon thread.

Each job renders its own running totals (a :class:`prometheus_client.registry.Collector`)
into a registry of its own, not the process-global one, so two jobs in one process never
mix their series.
"""

from __future__ import annotations

import errno
import logging
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector

from wayline.core.errors import ConfigError

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetricsServer:
    server: WSGIServer
    thread: threading.Thread
    host: str
    taken_port: int | None = None
    """The port asked for, when it was taken and this one served instead."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_port}/metrics"

    @property
    def where(self) -> str:
        """The URL, saying so when it is not the port asked for."""
        return self.url + (f" (port {self.taken_port} was taken)" if self.taken_port else "")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_metrics(collector: Collector, host: str, port: int, port_setting: str) -> MetricsServer:
    """Serve ``collector`` on ``host:port`` (port 0: any free port). A taken port falls back
    to a free one, logged with ``port_setting`` (the setting the port came from): two jobs,
    or two users, on one host would otherwise stop each other from starting."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE or port == 0:
            raise ConfigError(f"cannot serve metrics on {host}:{port} ({exc}); set {port_setting}") from exc
        server, thread = start_http_server(0, addr=host, registry=registry)
        _log.warning("metrics port %d on %s is taken (another job or user?): /metrics is on port %d instead; "
                     "set %s to choose one", port, host, server.server_port, port_setting)
        return MetricsServer(server, thread, host, taken_port=port)
    return MetricsServer(server, thread, host)


__all__ = ["MetricsServer", "serve_metrics"]
