"""What a sending task needs to know about an endpoint, as plain picklable values.

The driver turns each endpoint of the registry snapshot into a :class:`Target` once per
snapshot version and broadcasts them; a task then binds each target to its own
transport (:meth:`Target.bind`), so an OAuth2 token is fetched once per endpoint and task.
An endpoint whose settings cannot be used (no active signing secret, a credential the
auth kind refuses) becomes a target with a ``problem``: its deliveries go to the retry
path with that reason instead of failing the whole stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from wayline.core.errors import RejectedInput
from wayline.core.secret import Secret
from wayline.delivery.auth import BasicAuth, BearerAuth, ClientCredentials, OAuth2ClientCredentials
from wayline.delivery.transports.base import Auth, Endpoint, EndpointLimits, Transport

if TYPE_CHECKING:
    # Only for types: the snapshot module loads SQLAlchemy, which the delivery core does without.
    from wayline.registry.snapshot import EndpointTarget

Credentials = BasicAuth | BearerAuth | ClientCredentials


@dataclass(frozen=True, slots=True)
class Target:
    id: str
    url: str
    timeout_s: float
    limits: EndpointLimits
    secrets: tuple[Secret, ...] = field(repr=False)
    credentials: Credentials | None = field(default=None, repr=False)
    problem: str | None = None
    """Why nothing can be sent to this endpoint now; ``None`` when it is usable."""
    retry_schedule: tuple[timedelta, ...] | None = None
    """This endpoint's retry schedule; ``None``: the deployment's."""
    retry_statuses: frozenset[int] = frozenset()

    def bind(self, transport: Transport) -> Endpoint:
        """The endpoint as one task's dispatcher sends to it, with its auth bound to ``transport``."""
        auth: Auth | None
        if isinstance(self.credentials, ClientCredentials):
            auth = OAuth2ClientCredentials(self.credentials, transport)
        else:
            auth = self.credentials
        return Endpoint(self.id, self.url, timeout_s=self.timeout_s, limits=self.limits, auth=auth)


def target_of(endpoint: EndpointTarget) -> Target:
    """The target for one endpoint of the registry snapshot."""
    bare = Target(
        id=endpoint.id,
        url=endpoint.url,
        timeout_s=endpoint.timeout_ms / 1000,
        limits=EndpointLimits(max_in_flight=endpoint.max_in_flight, rate_per_s=endpoint.rate_limit_per_s),
        secrets=(),
        retry_schedule=(None if endpoint.retry_schedule_s is None
                        else tuple(timedelta(seconds=s) for s in endpoint.retry_schedule_s)),
        retry_statuses=frozenset(endpoint.retry_statuses),
    )
    try:
        secrets = tuple(Secret.parse(text) for text in endpoint.secrets)
        credentials = _credentials(endpoint.auth)
    except RejectedInput as exc:
        return replace(bare, problem=f"endpoint {endpoint.id} is misconfigured: {exc}")
    if not secrets:
        return replace(bare, problem=f"endpoint {endpoint.id} has no active signing secret")
    return replace(bare, secrets=secrets, credentials=credentials)


def _credentials(auth: Any) -> Credentials | None:
    """The registry's auth model (credentials decrypted) as the delivery side's values."""
    kind = auth.kind
    if kind == "none":
        return None
    if kind == "basic":
        return BasicAuth(auth.username, auth.password.get_secret_value())
    if kind == "bearer":
        return BearerAuth(auth.token.get_secret_value())
    if kind == "oauth2":
        return ClientCredentials(auth.token_url, auth.client_id, auth.client_secret.get_secret_value(), auth.scope)
    raise RejectedInput(f"unknown auth kind {kind!r}")


__all__ = ["Credentials", "Target", "target_of"]
