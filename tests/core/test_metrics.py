"""Serving a collector on /metrics: a taken port is a configuration error that names its setting."""

import pytest

from wayline.core.errors import ConfigError
from wayline.core.metrics import serve_metrics
from wayline.delivery.metrics import DeliveryMetrics


def test_a_taken_port_is_a_config_error() -> None:
    first = serve_metrics(DeliveryMetrics(), "127.0.0.1", 0, "WAYLINE_DELIVERY__METRICS_PORT")
    try:
        port = int(first.url.rsplit(":", 1)[1].split("/")[0])
        with pytest.raises(ConfigError, match="WAYLINE_DELIVERY__METRICS_PORT"):
            serve_metrics(DeliveryMetrics(), "127.0.0.1", port, "WAYLINE_DELIVERY__METRICS_PORT")
    finally:
        first.close()
