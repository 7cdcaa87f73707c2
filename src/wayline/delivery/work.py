"""A request on its way from the matching query to a sender process: one Kafka record.

With ``delivery.engine = "senders"`` the matching query (JVM only) writes every request
it routes to ``delivery.work_topic``, and the sender processes, a consumer group on that
topic, send them. The record is the one contract between the two:

- **key**: the endpoint id (UTF-8), so all of an endpoint's requests land on one
  partition and one sender process holds its in-flight and rate limits;
- **value**: the request body, exactly as the endpoint receives it (bytes; for a pair, the
  event as it goes into its batch);
- **headers** (UTF-8 text): :data:`KIND` (:data:`SINGLE`, a streaming request, or
  :data:`PAIR`, a batch-mode event the sender gathers into its subscription's batch:
  :mod:`wayline.delivery.open_batches`), :data:`SUBSCRIPTION`,
  :data:`ENDPOINT`, :data:`EVENT` (the event id: with the subscription, the webhook id's
  parts), :data:`SOURCE` (the Kafka topic the event was consumed from, for the
  self-audit's outcome) and :data:`VERSION` (the registry version the route came from: a
  sender whose snapshot is older refreshes it before sending).
"""

from __future__ import annotations

KIND = "wayline-kind"
SUBSCRIPTION = "wayline-subscription"
ENDPOINT = "wayline-endpoint"
EVENT = "wayline-event"
SOURCE = "wayline-source"
VERSION = "wayline-version"
HEADERS = (KIND, SUBSCRIPTION, ENDPOINT, EVENT, SOURCE, VERSION)
SINGLE = "single"
PAIR = "pair"
KINDS = (SINGLE, PAIR)

__all__ = ["ENDPOINT", "EVENT", "HEADERS", "KIND", "KINDS", "PAIR", "SINGLE", "SOURCE", "SUBSCRIPTION", "VERSION"]
