"""Wayline: event streaming on Apache Spark — webhook delivery, dynamic rules, reconciliation."""

__version__ = "0.1.0"
