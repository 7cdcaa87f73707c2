"""The registry changes delivery makes on its own, shared by the delivery job, the retry
drain and the sender processes (none of which needs Spark for them)."""

from __future__ import annotations

import logging

from wayline.core.errors import RejectedInput
from wayline.registry import subscription
from wayline.registry.access import Caller
from wayline.registry.db import Database

_log = logging.getLogger(__name__)

# Registry changes the job makes on its own (410 Gone) are an operator's, not a customer's.
DELIVERY_CALLER = Caller(key_id="wayline-delivery", customer_id=None)
GONE_REASON = "its endpoint answered 410 Gone"


def disable_gone(database: Database, subscription_ids: set[str]) -> None:
    """Disable the subscriptions whose endpoint answered 410 Gone (the version bump swaps them out)."""
    for subscription_id in sorted(subscription_ids):
        try:
            with database.transaction() as session:
                subscription.update(session, DELIVERY_CALLER, subscription_id,
                                    subscription.SubscriptionPatch(enabled=False, disabled_reason=GONE_REASON))
        except RejectedInput as exc:
            # Deleted meanwhile, or no longer valid as it stands: its 410s keep being handed over.
            _log.warning("could not disable subscription %s after 410 Gone: %s", subscription_id, exc)
        else:
            _log.warning("disabled subscription %s: its endpoint answered 410 Gone", subscription_id)


__all__ = ["DELIVERY_CALLER", "GONE_REASON", "disable_gone"]
