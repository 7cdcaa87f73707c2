"""Endpoint signing secrets in the Standard Webhooks ``whsec_`` format."""

import pytest

from wayline.core.errors import RejectedInput
from wayline.core.secret import MAX_SECRET_BYTES, MIN_SECRET_BYTES, Secret


def test_a_generated_secret_round_trips_through_its_text() -> None:
    secret = Secret.generate()
    assert secret.text.startswith("whsec_")
    assert Secret.parse(secret.text) == secret
    assert secret.key not in repr(secret).encode()


@pytest.mark.parametrize(
    "text",
    [
        "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0",  # no prefix
        "whsec_not*base64",
        "whsec_" + "QUJD",  # 3 bytes: too short
        "whsec_" + "QUFB" * 30,  # 90 bytes: too long
    ],
)
def test_malformed_secrets_are_rejected(text: str) -> None:
    with pytest.raises(RejectedInput):
        Secret.parse(text)


def test_secret_length_bounds_follow_the_spec() -> None:
    Secret(b"k" * MIN_SECRET_BYTES)
    Secret(b"k" * MAX_SECRET_BYTES)
    with pytest.raises(RejectedInput):
        Secret(b"k" * (MIN_SECRET_BYTES - 1))
