import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from wayline.core.errors import RejectedInput
from wayline.core.secret import Secret
from wayline.delivery.signing import (
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    batch_message_id,
    message_id,
    sign,
    signed_headers,
)

BODY = b'{"specversion":"1.0","id":"e1","source":"/s","type":"order.created","data":{"n":"\xc3\xa9"}}'


def test_signed_headers_verify_with_the_standardwebhooks_package() -> None:
    secret = Secret.generate()
    headers = signed_headers("msg_abc", int(time.time()), BODY, [secret])
    assert set(headers) == {ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER}
    assert Webhook(secret.text).verify(BODY, headers)["id"] == "e1"


def test_every_active_secret_signs_so_either_side_of_a_rotation_verifies() -> None:
    old, new, stranger = Secret.generate(), Secret.generate(), Secret.generate()
    headers = signed_headers("msg_rot", int(time.time()), BODY, [new, old])
    assert len(headers[SIGNATURE_HEADER].split(" ")) == 2
    Webhook(old.text).verify(BODY, headers)
    Webhook(new.text).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(stranger.text).verify(BODY, headers)


def test_a_changed_body_no_longer_verifies() -> None:
    secret = Secret.generate()
    headers = signed_headers("msg_x", int(time.time()), BODY, [secret])
    with pytest.raises(WebhookVerificationError):
        Webhook(secret.text).verify(BODY.replace(b"e1", b"e2"), headers)


def test_signing_needs_a_secret_and_a_dotless_id() -> None:
    with pytest.raises(RejectedInput):
        sign("msg_x", 1, BODY, [])
    with pytest.raises(RejectedInput):
        sign("msg.x", 1, BODY, [Secret.generate()])


def test_message_ids_are_stable_known_values() -> None:
    # Pinned: a change here changes every receiver's idempotency key.
    assert message_id("evt-1", "sub-1") == "msg_paqmronzagb2nlk2crh5s3eubq"
    assert batch_message_id("sub-1", ["evt-2", "evt-1"]) == "msg_rtoer6gzolta4nphjcd37k6qv4"


def test_message_ids_separate_their_parts() -> None:
    assert message_id("a", "bc") != message_id("ab", "c")
    assert message_id("e", "s1") != message_id("e", "s2")
    assert batch_message_id("s", ["e"]) != message_id("e", "s")
    assert batch_message_id("s1", ["e"]) != batch_message_id("s2", ["e"])


@given(st.lists(st.text(min_size=1), min_size=1, max_size=20, unique=True), st.randoms())
def test_a_batch_id_ignores_the_order_of_its_events(event_ids: list[str], rnd: random.Random) -> None:
    shuffled = list(event_ids)
    rnd.shuffle(shuffled)
    assert batch_message_id("sub", event_ids) == batch_message_id("sub", shuffled)


@given(st.text(min_size=1), st.text(min_size=1))
def test_message_ids_are_safe_to_sign(event_id: str, subscription_id: str) -> None:
    msg = message_id(event_id, subscription_id)
    assert msg.startswith("msg_") and "." not in msg and msg.isascii()
