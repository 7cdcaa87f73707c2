"""Keys and grants: what a customer key may do, and how long an instance remembers it."""

import re

import pytest

from wayline.core.errors import Forbidden, RejectedInput, Unauthorized
from wayline.core.settings import Settings
from wayline.core.topics import ReservedTopics
from wayline.messaging import access
from wayline.registry import api_key, customer
from wayline.registry.access import ADMIN, Caller

RESERVED = ReservedTopics.from_settings(Settings())
EVERYTHING = (("*", frozenset({"publish", "poll"})),)


def test_a_grant_admits_the_topics_its_pattern_matches_for_its_actions() -> None:
    perms = access.Permissions(Caller("key_1", "cus_1"), (("orders.*", frozenset({"publish"})),), RESERVED)
    perms.require("publish", "orders.eu")
    with pytest.raises(Forbidden, match="this API key may not poll topic orders.eu"):
        perms.require("poll", "orders.eu")
    with pytest.raises(Forbidden, match="may not publish topic payments"):
        perms.require("publish", "payments")
    access.Permissions(Caller("key_0", None), (), RESERVED).require("poll", "anything")


@pytest.mark.parametrize("topic", ["wayline.delivery.work", "wayline.quarantine", "events.wayline.operations",
                                   "wayline.audit.consumed", "__consumer_offsets"])
def test_no_key_publishes_to_a_reserved_topic_and_only_admins_poll_one(topic: str) -> None:
    admin = access.Permissions(Caller("key_0", None), (), RESERVED)
    customer_with_everything = access.Permissions(Caller("key_1", "cus_1"), EVERYTHING, RESERVED)
    for perms in (admin, customer_with_everything):
        with pytest.raises(Forbidden, match=f"^topic {topic} is reserved, this API key may not publish it: "):
            perms.require("publish", topic)
    admin.require("poll", topic)
    with pytest.raises(Forbidden, match=f"^topic {topic} is reserved, this API key may not poll it"):
        customer_with_everything.require("poll", topic)
    customer_with_everything.require("publish", "events.orders")


@pytest.mark.integration
def test_a_key_is_remembered_for_max_age_then_read_again(database) -> None:
    now = [0.0]
    authorizer = access.Authorizer(database, 2.0, RESERVED, clock=lambda: now[0])
    with database.transaction() as session:
        owner = customer.create(session, ADMIN, customer.CustomerIn(name="remembered"))
        key = api_key.create(session, ADMIN, api_key.ApiKeyIn(name="r", scope="customer", customer_id=owner.id))
    assert authorizer.permissions(key.key).grants == ()
    with database.transaction() as session:
        access.create_grant(session, ADMIN, access.GrantIn(api_key_id=key.id, pattern="x.*", actions=["poll"]), RESERVED)
        api_key.revoke(session, ADMIN, key.id)
    now[0] = 1.9
    assert authorizer.permissions(key.key).grants == ()
    now[0] = 2.0
    with pytest.raises(Unauthorized, match="this API key was revoked"):
        authorizer.permissions(key.key)
    with pytest.raises(Unauthorized, match="unknown API key"):
        authorizer.permissions("wl_key_nope_x")


@pytest.mark.integration
@pytest.mark.parametrize("pattern", ["wayline.delivery.work", "wayline.*", "__*", "events.wayline.operations"])
def test_a_grant_on_reserved_topics_only_is_refused(database, pattern: str) -> None:
    with database.transaction() as session:
        owner = customer.create(session, ADMIN, customer.CustomerIn(name="granted"))
        key = api_key.create(session, ADMIN, api_key.ApiKeyIn(name="g", scope="customer", customer_id=owner.id))
        with pytest.raises(RejectedInput, match=f"^pattern: {re.escape(pattern)} matches reserved topics only: "):
            access.create_grant(session, ADMIN, access.GrantIn(api_key_id=key.id, pattern=pattern,
                                                               actions=["poll"]), RESERVED)
