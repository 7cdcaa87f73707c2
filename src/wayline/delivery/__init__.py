"""Delivery: from matched events to signed HTTP requests, and what happens after each attempt.

One module per concept, pure Python, no Spark (the Spark jobs in ``wayline.pipelines``
call these on groups and Arrow batches):

- ``signing``      Standard Webhooks headers, ``whsec_`` secrets, stable webhook ids
- ``batch``        count-or-time batching per subscription shard; the CloudEvents batch body
- ``bucket``       many batch keys' pending items as one state value, with a replay guard
- ``retry``        outcome classification and the retry schedule (``next_attempt_at``)
- ``attempt``      one frozen type per delivery state; ``settle`` moves between them
- ``circuit``      per-endpoint circuit breakers
- ``transport``    the transport interface and its request/result values
- ``dispatch``     a group of sends under one deadline, with per-endpoint limits
- ``http_client``  the aiohttp transport
- ``auth``         Basic, Bearer and OAuth2 client-credentials headers
- ``targets``      an endpoint as a sending task needs it (picklable, auth bound per task)
- ``stage``        one task's deliveries under one deadline: skip settled, send, settle, record
- ``store``        the delivery log and the retry store (PostgreSQL)
- ``outcomes``     tallies per endpoint and subscription, and the micro-batch summary
- ``metrics``      the Prometheus view of the summaries
- ``holder``       the registry snapshot in use, swapped when the registry version moves

Only ``http_client`` imports an HTTP client; ``metrics`` serves ``/metrics`` with
prometheus-client, and ``store`` is the one module that talks to PostgreSQL.
"""

from wayline.delivery.attempt import (
    DeadLettered,
    DeadLetterReason,
    Gone,
    Kind,
    Pending,
    State,
    Succeeded,
    WillRetry,
    settle,
)
from wayline.delivery.auth import (
    BasicAuth,
    BearerAuth,
    ClientCredentials,
    OAuth2ClientCredentials,
    TokenError,
)
from wayline.delivery.batch import (
    BATCH_CONTENT_TYPE,
    Batch,
    Batcher,
    BatchItem,
    BatchKey,
    BatchLimits,
    PendingState,
    shard_for,
)
from wayline.delivery.bucket import Bucket, Bundle, ReadyBatch, Source
from wayline.delivery.circuit import CircuitBreaker, CircuitBreakers, CircuitSettings, CircuitState, process_breakers
from wayline.delivery.dispatch import Dispatcher, TokenBucket
from wayline.delivery.holder import SnapshotHolder, Versioned
from wayline.delivery.http_client import AiohttpTransport, HttpSettings
from wayline.delivery.metrics import DeliveryMetrics, MetricsServer, Overview, serve_metrics
from wayline.delivery.outcomes import BatchSummary, Outcome, PairTally, Tally, failure_reason
from wayline.delivery.retry import DEFAULT_SCHEDULE, Random, RetryPolicy, Verdict, classify, next_attempt_at
from wayline.delivery.signing import (
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Secret,
    batch_message_id,
    message_id,
    sign,
    signed_headers,
)
from wayline.delivery.stage import StageSettings, run_stage
from wayline.delivery.store import DeliveryLogEntry, DeliveryStore, PostgresDeliveryStore, RetryEntry, describe
from wayline.delivery.targets import Target, target_of
from wayline.delivery.transport import (
    Auth,
    Endpoint,
    EndpointLimits,
    Failure,
    FailureKind,
    Request,
    Response,
    Result,
    Transport,
)

__all__ = [
    "BATCH_CONTENT_TYPE",
    "DEFAULT_SCHEDULE",
    "ID_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "AiohttpTransport",
    "Auth",
    "BasicAuth",
    "Batch",
    "BatchItem",
    "BatchKey",
    "BatchLimits",
    "BatchSummary",
    "Batcher",
    "BearerAuth",
    "Bucket",
    "Bundle",
    "CircuitBreaker",
    "CircuitBreakers",
    "CircuitSettings",
    "CircuitState",
    "ClientCredentials",
    "DeadLetterReason",
    "DeadLettered",
    "DeliveryLogEntry",
    "DeliveryMetrics",
    "DeliveryStore",
    "Dispatcher",
    "Endpoint",
    "EndpointLimits",
    "Failure",
    "FailureKind",
    "Gone",
    "HttpSettings",
    "Kind",
    "MetricsServer",
    "OAuth2ClientCredentials",
    "Outcome",
    "Overview",
    "PairTally",
    "Pending",
    "PendingState",
    "PostgresDeliveryStore",
    "Random",
    "ReadyBatch",
    "Request",
    "Response",
    "Result",
    "RetryEntry",
    "RetryPolicy",
    "Secret",
    "SnapshotHolder",
    "Source",
    "StageSettings",
    "State",
    "Succeeded",
    "Tally",
    "Target",
    "TokenBucket",
    "TokenError",
    "Transport",
    "Verdict",
    "Versioned",
    "WillRetry",
    "batch_message_id",
    "classify",
    "describe",
    "failure_reason",
    "message_id",
    "next_attempt_at",
    "process_breakers",
    "run_stage",
    "serve_metrics",
    "settle",
    "shard_for",
    "sign",
    "signed_headers",
    "target_of",
]
