"""Serving a job's Prometheus metrics from its driver: ``/metrics`` on a daemon thread.

Each job renders its own running totals (a :class:`prometheus_client.registry.Collector`)
into a registry of its own, not the process-global one, so two jobs in one process never
mix their series.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector

from wayline.core.errors import ConfigError


@dataclass(frozen=True)
class MetricsServer:
    server: WSGIServer
    thread: threading.Thread
    host: str

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_metrics(collector: Collector, host: str, port: int, port_setting: str) -> MetricsServer:
    """Serve ``collector`` on ``host:port`` (port 0: any free port); ``port_setting`` names
    the setting the port came from, for the error when it is taken."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host}:{port} ({exc}); set {port_setting} to a free port") from exc
    return MetricsServer(server, thread, host)


__all__ = ["MetricsServer", "serve_metrics"]
