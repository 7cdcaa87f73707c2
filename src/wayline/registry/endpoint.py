"""Endpoints: where a customer receives webhooks, how Wayline authenticates to it, and
the Standard Webhooks secrets that sign every request (several during a rotation)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from typing import Annotated, Any, Literal

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, TypeAdapter, field_validator
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from wayline.core.errors import NotFound, RejectedInput
from wayline.core.secret import Secret
from wayline.core.settings import Settings
from wayline.registry.access import Caller, Page, owned, page, scoped
from wayline.registry.ids import new_id
from wayline.registry.models import Customer, Endpoint, SigningSecret, Subscription
from wayline.registry.secrets import SecretBox
from wayline.registry.urls import Resolver, check_endpoint_url, resolve

_HEADER_TOKEN = re.compile(r"[\x21-\x7e]+")


class NoAuth(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["none"] = "none"


class BasicAuth(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["basic"]
    username: str = Field(min_length=1, max_length=200)
    password: SecretStr


class BearerAuth(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["bearer"]
    token: SecretStr

    @field_validator("token")
    @classmethod
    def _fits_a_header(cls, token: SecretStr) -> SecretStr:
        # Refused now rather than at every send: a CR or LF would end the Authorization header.
        if not _HEADER_TOKEN.fullmatch(token.get_secret_value()):
            raise ValueError("must be visible ASCII characters, no spaces or line breaks: it is sent in the "
                             "Authorization header")
        return token


class OAuth2Auth(BaseModel):
    """OAuth2 client credentials: Wayline fetches a token and caches it until it expires."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["oauth2"]
    token_url: str = Field(min_length=1, max_length=2000)
    client_id: str = Field(min_length=1, max_length=200)
    client_secret: SecretStr
    scope: str | None = None
    audience: str | None = None


EndpointAuth = Annotated[NoAuth | BasicAuth | BearerAuth | OAuth2Auth, Field(discriminator="kind")]
_AUTH = TypeAdapter(EndpointAuth)


def _validate_secret(value: str | None) -> str | None:
    if value is not None:
        try:
            Secret.parse(value)
        except RejectedInput as exc:
            raise ValueError(str(exc)) from exc
    return value


def _new_secret() -> str:
    return Secret.generate().text


def _not_gone(statuses: list[int]) -> list[int]:
    if HTTPStatus.GONE in statuses:
        raise ValueError(f"{HTTPStatus.GONE.value} Gone always disables the subscription; it cannot be retried")
    return sorted(set(statuses))


RetrySchedule = Annotated[
    list[Annotated[float, Field(ge=0, le=86_400)]],
    Field(min_length=1, max_length=20, description="seconds to wait before each attempt, the first included (usually "
                                                   "0); its length is the number of attempts. The deployment's "
                                                   "schedule (delivery.retry_schedule_s) when null"),
]
RetryStatuses = Annotated[
    list[Annotated[int, Field(ge=400, le=499)]],
    Field(max_length=50, description="4xx statuses to retry besides 408, 409, 425 and 429"),
    AfterValidator(_not_gone),
]


class EndpointIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=1, max_length=2000)
    description: str = Field(default="", max_length=2000)
    customer_id: str | None = Field(default=None, description="admin keys only: the owning customer")
    auth: EndpointAuth = NoAuth()
    timeout_ms: int = Field(default=5000, ge=100, le=30_000)
    max_in_flight: int = Field(default=16, ge=1, le=1000)
    rate_limit_per_s: int | None = Field(default=None, ge=1, le=100_000)
    retry_schedule_s: RetrySchedule | None = None
    retry_statuses: RetryStatuses = Field(default_factory=list)
    secret: str | None = Field(default=None, description="a whsec_ secret; generated when absent")

    _secret = field_validator("secret")(_validate_secret)


class EndpointPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str | None = Field(default=None, min_length=1, max_length=2000)
    description: str | None = Field(default=None, max_length=2000)
    auth: EndpointAuth | None = None
    timeout_ms: int | None = Field(default=None, ge=100, le=30_000)
    max_in_flight: int | None = Field(default=None, ge=1, le=1000)
    rate_limit_per_s: int | None = Field(default=None, ge=1, le=100_000)
    retry_schedule_s: RetrySchedule | None = Field(default=None, description="null: back to the deployment's schedule")
    retry_statuses: RetryStatuses = Field(default_factory=list)
    enabled: bool | None = None
    disabled_reason: str | None = Field(default=None, max_length=500)


class DisabledSubscription(BaseModel):
    id: str
    disabled_reason: str | None
    disabled_at: datetime | None


class EndpointOut(BaseModel):
    id: str
    customer_id: str
    url: str
    description: str
    auth: dict[str, Any] = Field(description="the auth kind and its non-secret fields; credentials are never returned")
    timeout_ms: int
    max_in_flight: int
    rate_limit_per_s: int | None
    retry_schedule_s: list[float] | None
    retry_statuses: list[int]
    enabled: bool
    disabled_reason: str | None
    disabled_at: datetime | None
    disabled_subscriptions: list[DisabledSubscription] = Field(
        description="its subscriptions that are disabled, and why (a 410 Gone disables one, not the endpoint)"
    )
    created_at: datetime
    updated_at: datetime


class EndpointCreated(EndpointOut):
    secret: str = Field(description="the signing secret, shown here once; later from GET /endpoints/{id}/secrets")


class SecretOut(BaseModel):
    id: str
    secret: str
    created_at: datetime
    expires_at: datetime | None


class RotateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    secret: str | None = None

    _secret = field_validator("secret")(_validate_secret)


class EndpointService:
    """Endpoint operations; holds what they need besides the session (crypto, URL policy)."""

    def __init__(self, box: SecretBox, allow_list: list[str], overlap: timedelta, resolver: Resolver = resolve) -> None:
        self._box = box
        self._allow_list = allow_list
        self._overlap = overlap
        self._resolver = resolver

    @classmethod
    def from_settings(cls, settings: Settings, resolver: Resolver = resolve,
                      box: SecretBox | None = None) -> EndpointService:
        """The service as the deployment configures it: its encryption keys (``box``, when the
        caller holds them already) and URL policy."""
        return cls(
            box or SecretBox.from_settings(settings),
            list(settings.registry.url_allow_list),
            timedelta(seconds=settings.registry.secret_overlap_s),
            resolver,
        )

    def _check_urls(self, url: str, auth: BaseModel) -> None:
        check_endpoint_url(url, self._allow_list, self._resolver)
        if isinstance(auth, OAuth2Auth):
            try:
                check_endpoint_url(auth.token_url, self._allow_list, self._resolver)
            except RejectedInput as exc:
                raise RejectedInput(f"auth.token_{exc}") from exc

    def _seal_auth(self, auth: BaseModel) -> bytes | None:
        if isinstance(auth, NoAuth):
            return None
        plain = {k: (v.get_secret_value() if isinstance(v, SecretStr) else v) for k, v in auth}
        return self._box.seal(orjson.dumps(plain))

    def auth_of(self, row: Endpoint) -> NoAuth | BasicAuth | BearerAuth | OAuth2Auth:
        if row.auth_encrypted is None:
            return NoAuth()
        return _AUTH.validate_python(orjson.loads(self._box.open(row.auth_encrypted)))

    def out(self, session: Session, row: Endpoint) -> EndpointOut:
        return self._out(row, _disabled_subscriptions(session, [row.id]).get(row.id, []))

    def _out(self, row: Endpoint, disabled: list[DisabledSubscription]) -> EndpointOut:
        public = self.auth_of(row).model_dump(exclude={"password", "token", "client_secret"})
        return EndpointOut(
            id=row.id, customer_id=row.customer_id, url=row.url, description=row.description, auth=public,
            timeout_ms=row.timeout_ms, max_in_flight=row.max_in_flight, rate_limit_per_s=row.rate_limit_per_s,
            retry_schedule_s=row.retry_schedule_s, retry_statuses=row.retry_statuses,
            enabled=row.enabled, disabled_reason=row.disabled_reason, disabled_at=row.disabled_at,
            disabled_subscriptions=disabled, created_at=row.created_at, updated_at=row.updated_at,
        )

    def create(self, session: Session, caller: Caller, body: EndpointIn) -> EndpointCreated:
        customer_id = caller.owner_for(body.customer_id)
        if session.get(Customer, customer_id) is None:
            raise NotFound(f"customer {customer_id} not found")
        self._check_urls(body.url, body.auth)
        row = Endpoint(
            id=new_id("endpoint"), customer_id=customer_id, url=body.url, description=body.description,
            auth_kind=body.auth.kind, auth_encrypted=self._seal_auth(body.auth), timeout_ms=body.timeout_ms,
            max_in_flight=body.max_in_flight, rate_limit_per_s=body.rate_limit_per_s,
            retry_schedule_s=body.retry_schedule_s, retry_statuses=body.retry_statuses,
        )
        session.add(row)
        session.flush()
        secret = body.secret or _new_secret()
        session.add(SigningSecret(id=new_id("secret"), endpoint_id=row.id, secret_encrypted=self._box.seal(secret.encode())))
        session.flush()
        session.refresh(row)
        return EndpointCreated(**self._out(row, []).model_dump(), secret=secret)

    def get(self, session: Session, caller: Caller, endpoint_id: str) -> EndpointOut:
        return self.out(session, owned(session, Endpoint, endpoint_id, caller, "endpoint"))

    def list_(self, session: Session, caller: Caller, cursor: str | None, limit: int, max_limit: int) -> Page[EndpointOut]:
        rows, next_cursor = page(session, scoped(select(Endpoint), Endpoint, caller), Endpoint.id, cursor, limit, max_limit)
        disabled = _disabled_subscriptions(session, [r.id for r in rows])
        return Page[EndpointOut](data=[self._out(r, disabled.get(r.id, [])) for r in rows], next_cursor=next_cursor)

    def update(self, session: Session, caller: Caller, endpoint_id: str, body: EndpointPatch) -> EndpointOut:
        row = owned(session, Endpoint, endpoint_id, caller, "endpoint")
        changes = body.model_dump(exclude_unset=True, exclude={"auth", "enabled", "disabled_reason"})
        if body.url is not None or body.auth is not None:
            self._check_urls(body.url or row.url, body.auth or self.auth_of(row))
        if body.auth is not None:
            row.auth_kind, row.auth_encrypted = body.auth.kind, self._seal_auth(body.auth)
        for name, value in changes.items():
            setattr(row, name, value)
        if body.enabled is True:
            row.enabled, row.disabled_reason, row.disabled_at = True, None, None
        elif body.enabled is False:
            row.enabled = False
            row.disabled_reason = body.disabled_reason or caller.disabled_by
            row.disabled_at = datetime.now(timezone.utc)
        row.updated_at = datetime.now(timezone.utc)
        session.flush()
        return self.out(session, row)

    def delete(self, session: Session, caller: Caller, endpoint_id: str) -> None:
        session.delete(owned(session, Endpoint, endpoint_id, caller, "endpoint"))

    def secrets(self, session: Session, caller: Caller, endpoint_id: str, now: datetime | None = None) -> list[SecretOut]:
        """The secrets that sign right now, newest first; only the owner (or an admin) sees them."""
        owned(session, Endpoint, endpoint_id, caller, "endpoint")
        return [
            SecretOut(id=r.id, secret=self._box.open(r.secret_encrypted).decode(), created_at=r.created_at, expires_at=r.expires_at)
            for r in self.active_secret_rows(session, [endpoint_id], now)
        ]

    def active_secret_rows(self, session: Session, endpoint_ids: list[str] | None, now: datetime | None = None) -> list[SigningSecret]:
        now = now or datetime.now(timezone.utc)
        query = select(SigningSecret).where(or_(SigningSecret.expires_at.is_(None), SigningSecret.expires_at > now))
        if endpoint_ids is not None:
            query = query.where(SigningSecret.endpoint_id.in_(endpoint_ids))
        return list(session.scalars(query.order_by(SigningSecret.endpoint_id, SigningSecret.id.desc())))

    def open_secret(self, row: SigningSecret) -> str:
        return self._box.open(row.secret_encrypted).decode()

    def rotate(self, session: Session, caller: Caller, endpoint_id: str, body: RotateIn) -> list[SecretOut]:
        """A new secret signs from now on; the previous ones keep signing for the overlap period."""
        owned(session, Endpoint, endpoint_id, caller, "endpoint")
        now = datetime.now(timezone.utc)
        for row in self.active_secret_rows(session, [endpoint_id], now):
            if row.expires_at is None:
                row.expires_at = now + self._overlap
        session.add(SigningSecret(
            id=new_id("secret"), endpoint_id=endpoint_id,
            secret_encrypted=self._box.seal((body.secret or _new_secret()).encode()),
        ))
        session.flush()
        return self.secrets(session, caller, endpoint_id, now)


def _disabled_subscriptions(session: Session, endpoint_ids: list[str]) -> dict[str, list[DisabledSubscription]]:
    """The disabled subscriptions of these endpoints, by endpoint, in one query."""
    found: dict[str, list[DisabledSubscription]] = {}
    if not endpoint_ids:
        return found
    rows = session.execute(
        select(Subscription.endpoint_id, Subscription.id, Subscription.disabled_reason, Subscription.disabled_at)
        .where(Subscription.endpoint_id.in_(endpoint_ids), Subscription.enabled.is_(False))
        .order_by(Subscription.id)
    )
    for endpoint_id, subscription_id, reason, at in rows:
        found.setdefault(endpoint_id, []).append(DisabledSubscription(id=subscription_id, disabled_reason=reason, disabled_at=at))
    return found


__all__ = [
    "BasicAuth", "BearerAuth", "DisabledSubscription", "EndpointAuth", "EndpointCreated", "EndpointIn", "EndpointOut",
    "EndpointPatch", "EndpointService",
    "NoAuth", "OAuth2Auth", "RotateIn", "SecretOut",
]
