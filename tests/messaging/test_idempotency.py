"""The publish idempotency ledger on the real database: claim before writing, answer after."""

import pytest

from wayline.core.errors import Conflict
from wayline.messaging.idempotency import Answer, PublishLedger, fingerprint

pytestmark = pytest.mark.integration


def test_a_key_is_claimed_once_then_answers_with_what_was_stored(database, unique) -> None:
    ledger = PublishLedger(database, pending_s=60)
    request = fingerprint("orders", [1])
    assert ledger.claim("key_a", unique, request) is None
    with pytest.raises(Conflict, match="still being written: retry after it answers"):
        ledger.claim("key_a", unique, request)
    ledger.settle("key_a", unique, Answer(207, {"results": []}))
    assert ledger.claim("key_a", unique, request) == Answer(207, {"results": []})
    with pytest.raises(Conflict, match="used with a different topic or body"):
        ledger.claim("key_a", unique, fingerprint("payments", [1]))
    assert ledger.claim("key_b", unique, request) is None  # keys are per API key


def test_a_released_or_lapsed_claim_can_be_taken_again(database, unique) -> None:
    request = fingerprint("orders", [2])
    ledger = PublishLedger(database, pending_s=60)
    assert ledger.claim("key_a", unique, request) is None
    ledger.release("key_a", unique)
    assert ledger.claim("key_a", unique, request) is None
    lapsing = PublishLedger(database, pending_s=0.001)
    assert lapsing.claim("key_a", unique, request) is None


def test_a_request_is_its_canonical_json() -> None:
    assert fingerprint("orders", {"a": 1, "b": {"c": 2, "d": 3}}) == fingerprint("orders", {"b": {"d": 3, "c": 2}, "a": 1})
    assert fingerprint("orders", {"a": 1}) != fingerprint("orders", [{"a": 1}])
    assert fingerprint("orders", {"a": 1}) != fingerprint("payments", {"a": 1})
