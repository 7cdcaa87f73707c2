"""Standard Webhooks signing: the headers and the stable message ids (the secrets: ``wayline.core.secret``).

Every request carries ``webhook-id``, ``webhook-timestamp`` (unix seconds of this
attempt) and ``webhook-signature``: ``v1,<base64 HMAC-SHA256>`` of
``{id}.{timestamp}.{body}``, once per active secret, space-separated, so an endpoint
can rotate its secret without dropping a message.

The ``webhook-id`` is the receiver's idempotency key, so it must be the same on every
attempt and every replay: it is derived from what is delivered, never drawn at random.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Sequence

from wayline.core.errors import RejectedInput
from wayline.core.secret import Secret

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
MESSAGE_ID_PREFIX = "msg_"
SIGNATURE_VERSION = "v1"

# Distinct personalisations keep a single event's id and a batch's id from ever
# colliding, even for inputs that would encode alike.
_SINGLE_PERSON = b"wayline.single"
_BATCH_PERSON = b"wayline.batch"
_ID_DIGEST_BYTES = 16


def sign(msg_id: str, timestamp: int, body: bytes, secrets: Sequence[Secret]) -> str:
    """The ``webhook-signature`` value: one ``v1,<base64>`` per active secret."""
    if not secrets:
        raise RejectedInput(f"message {msg_id} cannot be signed: the endpoint has no active secret")
    if "." in msg_id:
        # The id is part of the dot-separated signed content; a dot would let two
        # different (id, timestamp, body) triples sign the same bytes.
        raise RejectedInput(f"a webhook id may not contain '.': {msg_id!r}")
    content = b"%s.%d.%s" % (msg_id.encode("utf-8"), timestamp, body)
    return " ".join(
        f"{SIGNATURE_VERSION},{base64.b64encode(hmac.digest(s.key, content, 'sha256')).decode('ascii')}"
        for s in secrets
    )


def signed_headers(msg_id: str, timestamp: int, body: bytes, secrets: Sequence[Secret]) -> dict[str, str]:
    """The three Standard Webhooks headers for one attempt at ``timestamp`` (unix seconds)."""
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(msg_id, timestamp, body, secrets),
    }


def message_id(event_id: str, subscription_id: str) -> str:
    """The webhook id of one event delivered for one subscription.

    The subscription takes part because an endpoint may hold two subscriptions that
    both match an event: each delivery is its own message to the receiver.
    """
    return _digest_id(_SINGLE_PERSON, (event_id, subscription_id))


def batch_message_id(subscription_id: str, event_ids: Iterable[str]) -> str:
    """The webhook id of a batch: the same for the same events in any order."""
    return _digest_id(_BATCH_PERSON, (subscription_id, *sorted(event_ids)))


def _digest_id(person: bytes, parts: Sequence[str]) -> str:
    # Length-prefixing makes the encoding unambiguous without depending on any
    # serialiser's output staying the same across versions.
    digest = hashlib.blake2b(digest_size=_ID_DIGEST_BYTES, person=person)
    for part in parts:
        encoded = part.encode("utf-8")
        digest.update(len(encoded).to_bytes(4, "big"))
        digest.update(encoded)
    return MESSAGE_ID_PREFIX + base64.b32encode(digest.digest()).decode("ascii").rstrip("=").lower()


__all__ = [
    "ID_HEADER",
    "MESSAGE_ID_PREFIX",
    "SIGNATURE_HEADER",
    "SIGNATURE_VERSION",
    "TIMESTAMP_HEADER",
    "batch_message_id",
    "message_id",
    "sign",
    "signed_headers",
]
