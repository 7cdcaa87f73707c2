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
- ``store``        the delivery log, the retry store, the attempt log and the dead letters (PostgreSQL)
- ``drain``        the retry path: claim due retries, attempt, settle, bury the dead, find failing endpoints
- ``attempt_log``  every attempt, as the customer lists it
- ``dead_letter``  dead letters as the customer uses them: poll, acknowledge, replay; test events
- ``operations``   Wayline's own CloudEvents (endpoint disabled, message dead-lettered) onto Kafka
- ``outcomes``     tallies per endpoint and subscription, and the micro-batch summary
- ``metrics``      the Prometheus view of the summaries
- ``holder``       the registry snapshot in use, swapped when the registry version moves, and
                   other values the driver re-reads now and then (the failing endpoints)

Only ``http_client`` imports an HTTP client; ``metrics`` renders the totals with
prometheus-client (``wayline.core.metrics`` serves them); ``store``, ``drain``,
``attempt_log`` and ``dead_letter`` talk to PostgreSQL, ``operations`` to Kafka.
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
    defer,
    settle,
)
from wayline.delivery.auth import (
    BasicAuth,
    BearerAuth,
    ClientCredentials,
    OAuth2ClientCredentials,
    TokenError,
)
from wayline.delivery.attempt_log import AttemptOut, AttemptPage, list_attempts
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
from wayline.delivery.dead_letter import (
    AckUpTo,
    Acknowledged,
    DeadLetterOut,
    DeadLetterPage,
    Replayed,
    ReplayRange,
    TestEventIn,
    TestEventOut,
    acknowledge_dead_letter,
    acknowledge_up_to,
    get_dead_letter,
    poll_dead_letters,
    replay_dead_letter,
    replay_dead_letters,
    send_test_event,
)
from wayline.delivery.dispatch import Dispatcher, TokenBucket
from wayline.delivery.drain import Buried, Claim, EndpointHealth, Failing, RetryQueue, run_retry_stage
from wayline.delivery.holder import Polled, SnapshotHolder, Versioned
from wayline.delivery.http_client import AiohttpTransport, HttpSettings, transport_for
from wayline.delivery.metrics import DeliveryMetrics, Overview
from wayline.delivery.reqwest_transport import ReqwestTransport
from wayline.delivery.operations import (
    OperationalEvent,
    OperationsProducer,
    dead_lettered_events,
    endpoint_disabled_event,
)
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
from wayline.delivery.stage import StageSettings, attempt_all, run_stage
from wayline.delivery.store import (
    AttemptLogEntry,
    DeadLetterEntry,
    DeliveryLogEntry,
    DeliveryStore,
    PostgresDeliveryStore,
    RetryEntry,
    attempt_row,
    describe,
    failed_attempt,
)
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
    "AckUpTo",
    "Acknowledged",
    "AiohttpTransport",
    "AttemptLogEntry",
    "AttemptOut",
    "AttemptPage",
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
    "Buried",
    "CircuitBreaker",
    "CircuitBreakers",
    "CircuitSettings",
    "CircuitState",
    "Claim",
    "ClientCredentials",
    "DeadLetterEntry",
    "DeadLetterOut",
    "DeadLetterPage",
    "DeadLetterReason",
    "DeadLettered",
    "DeliveryLogEntry",
    "DeliveryMetrics",
    "DeliveryStore",
    "Dispatcher",
    "Endpoint",
    "EndpointHealth",
    "EndpointLimits",
    "Failing",
    "Failure",
    "FailureKind",
    "Gone",
    "HttpSettings",
    "Kind",
    "OAuth2ClientCredentials",
    "OperationalEvent",
    "OperationsProducer",
    "Outcome",
    "Overview",
    "PairTally",
    "Pending",
    "PendingState",
    "PostgresDeliveryStore",
    "Random",
    "ReadyBatch",
    "ReplayRange",
    "Replayed",
    "Request",
    "ReqwestTransport",
    "Response",
    "Result",
    "RetryEntry",
    "RetryPolicy",
    "RetryQueue",
    "Polled",
    "Secret",
    "SnapshotHolder",
    "Source",
    "StageSettings",
    "State",
    "Succeeded",
    "Tally",
    "Target",
    "TestEventIn",
    "TestEventOut",
    "TokenBucket",
    "TokenError",
    "Transport",
    "Verdict",
    "Versioned",
    "WillRetry",
    "acknowledge_dead_letter",
    "acknowledge_up_to",
    "attempt_all",
    "attempt_row",
    "batch_message_id",
    "classify",
    "dead_lettered_events",
    "defer",
    "describe",
    "endpoint_disabled_event",
    "failed_attempt",
    "failure_reason",
    "get_dead_letter",
    "list_attempts",
    "message_id",
    "next_attempt_at",
    "poll_dead_letters",
    "process_breakers",
    "replay_dead_letter",
    "replay_dead_letters",
    "run_retry_stage",
    "run_stage",
    "send_test_event",
    "settle",
    "shard_for",
    "sign",
    "signed_headers",
    "target_of",
    "transport_for",
]
