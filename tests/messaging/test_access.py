"""Keys and grants: what a customer key may do, and how long an instance remembers it."""

import pytest

from wayline.core.errors import Forbidden, Unauthorized
from wayline.messaging import access
from wayline.registry import api_key, customer
from wayline.registry.access import ADMIN


def test_a_grant_admits_the_topics_its_pattern_matches_for_its_actions() -> None:
    from wayline.registry.access import Caller

    perms = access.Permissions(Caller("key_1", "cus_1"), (("orders.*", frozenset({"publish"})),))
    perms.require("publish", "orders.eu")
    with pytest.raises(Forbidden, match="this API key may not poll topic orders.eu"):
        perms.require("poll", "orders.eu")
    with pytest.raises(Forbidden, match="may not publish topic payments"):
        perms.require("publish", "payments")
    access.Permissions(Caller("key_0", None), ()).require("poll", "anything")


@pytest.mark.integration
def test_a_key_is_remembered_for_max_age_then_read_again(database) -> None:
    now = [0.0]
    authorizer = access.Authorizer(database, 2.0, clock=lambda: now[0])
    with database.transaction() as session:
        owner = customer.create(session, ADMIN, customer.CustomerIn(name="remembered"))
        key = api_key.create(session, ADMIN, api_key.ApiKeyIn(name="r", scope="customer", customer_id=owner.id))
    assert authorizer.permissions(key.key).grants == ()
    with database.transaction() as session:
        access.create_grant(session, ADMIN, access.GrantIn(api_key_id=key.id, pattern="x.*", actions=["poll"]))
        api_key.revoke(session, ADMIN, key.id)
    now[0] = 1.9
    assert authorizer.permissions(key.key).grants == ()
    now[0] = 2.0
    with pytest.raises(Unauthorized, match="this API key was revoked"):
        authorizer.permissions(key.key)
    with pytest.raises(Unauthorized, match="unknown API key"):
        authorizer.permissions("wl_key_nope_x")
