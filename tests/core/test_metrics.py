"""Serving a collector on /metrics: a taken port falls back to a free one, and says so."""

import logging
import socket
import urllib.request

import pytest

from wayline.core.errors import ConfigError
from wayline.core.metrics import serve_metrics
from wayline.delivery.metrics import DeliveryMetrics


def test_a_taken_port_falls_back_to_a_free_one_and_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.WARNING, logger="wayline.core.metrics"):
            server = serve_metrics(DeliveryMetrics(), "127.0.0.1", port, "WAYLINE_DELIVERY__METRICS_PORT")
        try:
            served = server.server.server_port
            assert served != port and server.url == f"http://127.0.0.1:{served}/metrics"
            assert server.where == f"{server.url} (port {port} was taken)"
            with urllib.request.urlopen(server.url, timeout=10) as response:
                assert b"wayline_delivery" in response.read()
        finally:
            server.close()
    [line] = [r.getMessage() for r in caplog.records if r.name == "wayline.core.metrics"]
    assert f"port {port}" in line and f"port {served} instead" in line and "WAYLINE_DELIVERY__METRICS_PORT" in line


def test_an_address_that_cannot_be_served_is_a_config_error() -> None:
    # 192.0.2.0/24 is reserved for documentation: no interface of this host has it.
    with pytest.raises(ConfigError, match="WAYLINE_DELIVERY__METRICS_PORT"):
        serve_metrics(DeliveryMetrics(), "192.0.2.1", 9464, "WAYLINE_DELIVERY__METRICS_PORT")
