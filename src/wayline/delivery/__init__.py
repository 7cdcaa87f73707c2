"""Delivery: from matched events to signed HTTP requests, and what happens after each attempt.

One module per concept, pure Python, no Spark (the Spark jobs in ``wayline.pipelines``
call these on groups and Arrow batches):

- ``signing``      Standard Webhooks headers, ``whsec_`` secrets, stable webhook ids
- ``batch``        count-or-time batching per subscription shard; the CloudEvents batch body
- ``retry``        outcome classification and the retry schedule (``next_attempt_at``)
- ``attempt``      one frozen type per delivery state; ``settle`` moves between them
- ``circuit``      per-endpoint circuit breakers
- ``transport``    the transport interface and its request/result values
- ``dispatch``     a group of sends under one deadline, with per-endpoint limits
- ``http_client``  the aiohttp transport
- ``auth``         Basic, Bearer and OAuth2 client-credentials headers

Only ``http_client`` imports an HTTP library.
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
from wayline.delivery.circuit import CircuitBreaker, CircuitBreakers, CircuitSettings, CircuitState
from wayline.delivery.dispatch import Dispatcher, TokenBucket
from wayline.delivery.http_client import AiohttpTransport, HttpSettings
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
    "Batcher",
    "BearerAuth",
    "CircuitBreaker",
    "CircuitBreakers",
    "CircuitSettings",
    "CircuitState",
    "ClientCredentials",
    "DeadLetterReason",
    "DeadLettered",
    "Dispatcher",
    "Endpoint",
    "EndpointLimits",
    "Failure",
    "FailureKind",
    "Gone",
    "HttpSettings",
    "Kind",
    "OAuth2ClientCredentials",
    "Pending",
    "PendingState",
    "Random",
    "Request",
    "Response",
    "Result",
    "RetryPolicy",
    "Secret",
    "State",
    "Succeeded",
    "TokenBucket",
    "TokenError",
    "Transport",
    "Verdict",
    "WillRetry",
    "batch_message_id",
    "classify",
    "message_id",
    "next_attempt_at",
    "settle",
    "shard_for",
    "sign",
    "signed_headers",
]
