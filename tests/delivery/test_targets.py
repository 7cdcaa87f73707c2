"""Endpoints of the registry snapshot as picklable targets, bound to a task's transport."""

import pickle
from datetime import timedelta

from pydantic import SecretStr

from wayline.core.secret import Secret
from wayline.delivery.auth import BasicAuth, BearerAuth, ClientCredentials, OAuth2ClientCredentials
from wayline.delivery.targets import target_of
from wayline.delivery.transports.aiohttp import AiohttpTransport
from wayline.delivery.transports.base import EndpointLimits
from wayline.registry import endpoint as registry
from wayline.registry.snapshot import EndpointTarget

SECRET = Secret.generate()


def endpoint(auth: object = registry.NoAuth(), secrets: tuple[str, ...] = (SECRET.text,)) -> EndpointTarget:
    return EndpointTarget(id="ep_1", customer_id="cus_1", url="http://127.0.0.1:9/hook", auth=auth, timeout_ms=2500,
                          max_in_flight=4, rate_limit_per_s=20, secrets=secrets)


def test_settings_credentials_and_secrets_carry_over_and_survive_pickling() -> None:
    second = Secret.generate()
    target = target_of(endpoint(registry.BasicAuth(kind="basic", username="u", password=SecretStr("hunter2-pw")),
                                (SECRET.text, second.text)))
    assert (target.timeout_s, target.limits, target.problem) == (2.5, EndpointLimits(4, 20.0), None)
    assert target.secrets == (SECRET, second)
    assert target.credentials == BasicAuth("u", "hunter2-pw")
    assert pickle.loads(pickle.dumps(target)) == target
    assert "hunter2" not in repr(target)


def test_each_auth_kind_maps_to_its_delivery_auth() -> None:
    bearer = target_of(endpoint(registry.BearerAuth(kind="bearer", token=SecretStr("t0k"))))
    oauth = target_of(endpoint(registry.OAuth2Auth(kind="oauth2", token_url="http://127.0.0.1:9/token",
                                                   client_id="c", client_secret=SecretStr("s"), scope="x")))
    assert bearer.credentials == BearerAuth("t0k")
    assert oauth.credentials == ClientCredentials("http://127.0.0.1:9/token", "c", "s", "x")
    assert target_of(endpoint()).credentials is None


def test_binding_gives_each_task_its_own_oauth2_token_cache() -> None:
    oauth = target_of(endpoint(registry.OAuth2Auth(kind="oauth2", token_url="http://127.0.0.1:9/token",
                                                   client_id="c", client_secret=SecretStr("s"))))
    transport = AiohttpTransport()
    bound = oauth.bind(transport)
    assert isinstance(bound.auth, OAuth2ClientCredentials)
    assert bound.auth is not oauth.bind(transport).auth
    assert (bound.id, bound.url, bound.timeout_s) == ("ep_1", "http://127.0.0.1:9/hook", 2.5)
    plain = target_of(endpoint()).bind(transport)
    assert plain.auth is None


def test_an_unusable_endpoint_becomes_a_target_with_a_problem_not_an_error() -> None:
    no_secret = target_of(endpoint(secrets=()))
    assert no_secret.problem == "endpoint ep_1 has no active signing secret"
    colon = target_of(endpoint(registry.BasicAuth(kind="basic", username="a:b", password=SecretStr("p"))))
    assert colon.problem is not None and "may not contain ':'" in colon.problem
    assert colon.secrets == () and colon.credentials is None


def test_an_endpoints_retry_settings_carry_over_and_default_to_the_deployments() -> None:
    own = target_of(EndpointTarget(
        id="ep_2", customer_id="cus_1", url="http://127.0.0.1:9/hook", auth=registry.NoAuth(), timeout_ms=1000,
        max_in_flight=1, rate_limit_per_s=None, secrets=(SECRET.text,), retry_schedule_s=(0.0, 1.5),
        retry_statuses=(400, 404)))
    assert own.retry_schedule == (timedelta(0), timedelta(seconds=1.5))
    assert own.retry_statuses == frozenset({400, 404})
    default = target_of(endpoint())
    assert (default.retry_schedule, default.retry_statuses) == (None, frozenset())
