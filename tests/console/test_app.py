"""The console end to end in headless Chromium: the real admin app with the console, the
real broker and PostgreSQL, the delivery job on the session's Spark and the retry drain beside it,
and a real receiver on 127.0.0.1 that can be made to fail.

The module's scenario is set up once (the Spark queries are the expensive part); the
customer's flow then runs as one test, in order, the way a person would click through it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from confluent_kafka import Producer
from playwright.sync_api import Browser, Locator, Page, expect

from tests.api.servers import served
from tests.delivery.receivers import Receivers
from tests.delivery.servers import Recorder
from tests.waiting import wait_for
from wayline.core.kafka import ensure_topics
from wayline.core.metrics import serve_metrics
from wayline.core.progress import Collectors, QueryProgress
from wayline.core.settings import DeliverySettings, Settings
from wayline.delivery.metrics import DeliveryMetrics
from wayline.recon import reconciliation, store
from wayline.recon.figures import Counts
from wayline.registry import api_key, catalog, customer, rule
from wayline.registry.access import ADMIN
from wayline.registry.endpoint import EndpointIn, EndpointService
from wayline.rules.counters import JobCounters, RuleCounters
from wayline.rules.metrics import RulesMetrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PREFIX = "events.con."
TOPIC = f"{PREFIX}orders"
EVENT_TYPE = "con.order.created"
TENANT = "con-t"
PAGE_SIZE = 3
WAIT_MS = 120_000


@dataclass
class Receiver:
    """The customer's receiver: answers 204 while healthy, 500 while failing."""

    recorder: Recorder = field(default_factory=Recorder)
    healthy: bool = True
    delivered: list[str] = field(default_factory=list)
    """webhook-ids answered 204, in arrival order."""

    async def handle(self, request: web.Request) -> web.Response:
        received = await self.recorder.record(request)
        if not self.healthy:
            return web.Response(status=500, text="receiver down for maintenance")
        self.delivered.append(received.headers["webhook-id"])
        return web.Response(status=204)


@dataclass
class Scenario:
    base: str
    settings: Settings
    receiver: Receiver
    hook_url: str
    customer_id: str
    customer_key: str
    admin_key: str
    other_endpoint_id: str
    rule_id: str
    producer: Producer

    def produce(self, ids: list[str]) -> None:
        for event_id in ids:
            self.producer.produce(TOPIC, orjson.dumps({
                "specversion": "1.0", "id": event_id, "source": "/console-test", "type": EVENT_TYPE,
                "tenantid": TENANT, "data": {"amount": 42}}))
        assert self.producer.flush(30) == 0


@pytest.fixture(scope="module")
def scenario(api_settings: Settings, database, spark, admin_key: str, tmp_path_factory) -> Iterator[Scenario]:
    from wayline.api.app import create_app
    from wayline.console.app import install
    from wayline.delivery.runtime.retries import start_retries
    from wayline.pipelines.delivery import start_delivery

    metrics, progress = DeliveryMetrics(), QueryProgress()
    metrics_server = serve_metrics(Collectors(metrics, progress), "127.0.0.1", 0, "WAYLINE_DELIVERY__METRICS_PORT")
    settings = api_settings.model_copy(update={
        "kafka": api_settings.kafka.model_copy(update={"event_topic_prefix": PREFIX}),
        # A quick retry path, and a circuit that never opens: the test decides when the receiver fails.
        "delivery": DeliverySettings(
            stage_deadline_s=2.0, version_poll_s=0.5, trigger_interval_s=0.5, send_partitions=1, retry_jitter=0.0,
            retry_poll_s=0.5, retry_lease_s=3.0, circuit_consecutive_failures=1000, circuit_window=1000, circuit_min_calls=1000,
            metrics_port=metrics_server.server.server_port,
            # Nothing else serves these in this test: the jobs view shows them down.
            retry_metrics_port=metrics_server.server.server_port + 1,
        ),
        "console": api_settings.console.model_copy(update={"page_size": PAGE_SIZE}),
    })
    ensure_topics(settings.kafka_bootstrap(), [TOPIC], 2)
    root = tmp_path_factory.mktemp("console")
    endpoints = EndpointService.from_settings(settings)
    receiver = Receiver()
    with Receivers() as receivers:
        base_url = receivers.serve({"/hook": receiver.handle, "/other": receiver.handle})
        with database.transaction() as s:
            catalog.upsert_tenants(s, ADMIN, [catalog.TenantIn(id=TENANT), catalog.TenantIn(id="con-other")])
            catalog.create_event_type(s, ADMIN, catalog.EventTypeIn(name=EVENT_TYPE, description="an order"))
            mine = customer.create(s, ADMIN, customer.CustomerIn(name="Console Co", tenants=[TENANT]))
            theirs = customer.create(s, ADMIN, customer.CustomerIn(name="Someone Else", tenants=["con-other"]))
            key = api_key.create(s, ADMIN, api_key.ApiKeyIn(name="console", scope="customer", customer_id=mine.id)).key
            other = endpoints.create(s, ADMIN, EndpointIn(url=f"{base_url}/other", customer_id=theirs.id))
            quarantined = rule.create(s, ADMIN, rule.RuleIn(
                name="con-big-orders", sql="SELECT id, data.amount AS amount FROM events WHERE data.amount > 100",
                output_topic="con.big-orders", output_type="con.big-order"), rule.RulePolicy.from_settings(settings))
            rule.quarantine(s, quarantined.id, quarantined.revision, "state budget exceeded: 1,000,001 entries")
            recon = reconciliation.create(s, ADMIN, reconciliation.ReconciliationIn.model_validate({
                "name": "con-orders", "expected": {"role": "producer-expected", "topics": ["con.audit"]},
                "actual": {"role": "actual", "topics": [TOPIC]}, "periods": {"o": 60, "n": 10, "m": 600, "z": 60},
            }), reconciliation.OutputTopics.from_settings(settings))
            # Figures as the recon job records them: one micro-batch of two sources' counts.
            minute = int(datetime.now(UTC).timestamp() // 60 * 60_000)
            store.apply_batch(s, "console-test", 0, {recon.id: 60_000}, {recon.id: 10_000}, [
                store.WindowChange(recon.id, "/console-test", minute, Counts(expected=200, matched=197, missing=3)),
                store.WindowChange(recon.id, "/billing", minute, Counts(expected=80, matched=80)),
            ], {}, [])
        # The rules job's metrics endpoint, serving counts as that job keeps them for the rule.
        counters = JobCounters(batches=40, events=1200, rules={quarantined.id: RuleCounters(
            "con-big-orders", input=1200, matches=37, micros=2_500_000, state=0, late=2, quarantined=1)})
        rules_server = serve_metrics(RulesMetrics(counters), "127.0.0.1", 0, "WAYLINE_RULES__METRICS_PORT")
        settings = settings.model_copy(update={
            "rules": settings.rules.model_copy(update={"metrics_port": rules_server.server.server_port})})
        job = start_delivery(spark, settings, database, endpoints, metrics, checkpoint=root / "delivery")
        progress.watch(lambda: job.queries)
        retries = start_retries(settings, database, endpoints)
        producer = Producer({"bootstrap.servers": settings.kafka_bootstrap()})
        try:
            with served(install(create_app(settings, database))) as base:
                yield Scenario(base, settings, receiver, f"{base_url}/hook", mine.id, key, admin_key, other.id,
                               quarantined.id, producer)
            assert job.isActive and job.exception() is None, job.exception()
            assert retries.isActive and retries.exception() is None, retries.exception()
        finally:
            job.stop()
            retries.stop()
            metrics_server.close()
            rules_server.close()


def signed_in(browser: Browser, scenario: Scenario, key: str, **options) -> Page:
    page = browser.new_context(base_url=scenario.base, **options).new_page()
    page.set_default_timeout(30_000)
    page.goto("/console/")
    expect(page).to_have_url(re.compile(r"/console/sign-in$"))
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    return page


def submitted(page: Page, button: str) -> None:
    """Click a form's button; the page that follows shows no error (else the test says which)."""
    page.get_by_role("button", name=button).click()
    page.wait_for_load_state()
    problems = page.locator(".problem").all_inner_texts()
    assert not problems, f"{button}: {problems}"


def test_a_customer_delivers_watches_attempts_and_replays_dead_letters(
        browser: Browser, scenario: Scenario, screenshots: Path) -> None:
    page = signed_in(browser, scenario, scenario.customer_key)
    expect(page).to_have_url(re.compile(r"/console/endpoints$"))

    # Create an endpoint with its own short retry schedule: three attempts.
    page.get_by_label("URL").fill(scenario.hook_url)
    page.get_by_label("Description").fill("orders to the warehouse")
    page.get_by_label("Retry schedule").fill("0, 0.5, 0.5")
    submitted(page, "Create endpoint")
    expect(page).to_have_url(re.compile(r"/console/endpoints/ep_"))
    endpoint_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("ol.schedule li")).to_have_text([
        "attempt 1 as soon as the event arrives", "attempt 2 0.5 s after attempt 1 failed",
        "attempt 3 0.5 s after attempt 2 failed"])

    # Subscribe it to the order events.
    page.get_by_role("link", name="Add a subscription").click()
    page.locator(f"#event-types input[value='{EVENT_TYPE}']").check()
    page.get_by_label("Tenants (comma-separated)").fill(TENANT)
    submitted(page, "Create subscription")
    expect(page.locator("#subscriptions tbody tr")).to_have_count(1)
    expect(page.locator("#subscriptions")).to_contain_text(EVENT_TYPE)

    # Watch the attempts appear: the page is open before the events are produced.
    page.goto(f"/console/attempts?endpoint_id={endpoint_id}")
    expect(page.locator("#attempts tr.attempt")).to_have_count(0)
    scenario.produce([f"con-ok-{n}" for n in range(PAGE_SIZE + 1)])
    expect(page.locator("#attempts tr.attempt.succeeded")).to_have_count(PAGE_SIZE, timeout=WAIT_MS)
    expect(page.locator("#attempts td.webhook").first).to_have_text(re.compile(r"^msg_"))
    page.get_by_role("link", name="Next page").click()
    expect(page.locator("#attempts tr.attempt.succeeded")).to_have_count(1)
    assert len(set(scenario.receiver.delivered)) == PAGE_SIZE + 1

    # The endpoint fails: every attempt of the next events fails, and they die.
    scenario.receiver.healthy = False
    failing = ["con-fail-0", "con-fail-1"]
    scenario.produce(failing)
    page.goto(f"/console/attempts?endpoint_id={endpoint_id}&outcome=failed")
    expect(page.locator("#attempts tr.attempt.failed")).to_have_count(PAGE_SIZE, timeout=WAIT_MS)
    expect(page.locator("#attempts .excerpt").first).to_contain_text("500")
    page.screenshot(path=screenshots / "attempts.png", full_page=True)

    page.goto(f"/console/dead-letters?endpoint_id={endpoint_id}")
    rows = page.locator("#dead-letters tbody input[name=id]")

    def all_dead() -> bool:
        page.reload()
        return rows.count() == len(failing)

    # The retry path buries them after their last attempt; the page shows them on a reload.
    wait_for(all_dead, "the failing events' dead letters", timeout_s=120, every_s=1)
    dead_ids = page.locator("#dead-letters tbody code").all_inner_texts()
    page.screenshot(path=screenshots / "dead-letters.png", full_page=True)

    # Fixed: replay them, and the receiver gets them with the same webhook ids.
    scenario.receiver.healthy = True
    page.get_by_label("select all").check()
    submitted(page, "Replay selected")
    expect(page.locator("#dead-letters tbody input[name=id]")).to_have_count(0)
    wait_for(lambda: set(dead_ids) <= set(scenario.receiver.delivered), "the replayed dead letters")

    # One more dies, and is acknowledged instead: gone, and never delivered.
    scenario.receiver.healthy = False
    scenario.produce(["con-fail-2"])
    wait_for(lambda: (page.reload() is not None) and rows.count() == 1, "the third dead letter", timeout_s=120,
             every_s=1)
    dropped = page.locator("#dead-letters tbody code").inner_text()
    scenario.receiver.healthy = True
    rows.first.check()
    submitted(page, "Acknowledge selected")
    expect(rows).to_have_count(0)
    assert dropped not in scenario.receiver.delivered

    # Health, rotation and a test event on the endpoint's page.
    page.goto(f"/console/endpoints/{endpoint_id}")
    expect(page.locator("#health")).to_contain_text("attempts succeeded")
    assert page.locator("#health svg .rate").count() >= 1
    submitted(page, "Rotate the signing secret")
    expect(page.locator("#secrets tbody tr")).to_have_count(2)
    expect(page.locator("#secrets tbody")).to_contain_text("never (current)")
    page.screenshot(path=screenshots / "endpoint.png", full_page=True)
    submitted(page, "Send test event")
    expect(page).to_have_url(re.compile(r"/console/attempts\?.*webhook_id="))
    expect(page.locator("#attempts tr.attempt.succeeded")).to_have_count(1, timeout=WAIT_MS)

    page.goto("/console/endpoints")
    page.screenshot(path=screenshots / "endpoints.png", full_page=True)
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/console/sign-in$"))
    page.goto(f"/console/endpoints/{endpoint_id}")
    expect(page).to_have_url(re.compile(r"/console/sign-in\?next="))
    page.context.close()


def test_another_customers_pages_are_not_found(browser: Browser, scenario: Scenario) -> None:
    page = signed_in(browser, scenario, scenario.customer_key)
    for path in (f"/console/endpoints/{scenario.other_endpoint_id}",
                 f"/console/attempts?endpoint_id={scenario.other_endpoint_id}",
                 f"/console/dead-letters?endpoint_id={scenario.other_endpoint_id}"):
        answer = page.goto(path)
        assert answer is not None and answer.status == 404, path
        expect(page.locator(".problem")).to_contain_text(f"endpoint {scenario.other_endpoint_id} not found")
    # Operator pages need an admin key, as in the API.
    answer = page.goto("/console/customers")
    assert answer is not None and answer.status == 403
    page.context.close()


def test_revoking_the_key_ends_its_console_sessions(browser: Browser, scenario: Scenario, database) -> None:
    with database.transaction() as s:
        owner = customer.get(s, ADMIN, scenario.customer_id)
        fresh = api_key.create(s, ADMIN, api_key.ApiKeyIn(name="short-lived", scope="customer",
                                                          customer_id=owner.id))
    page = signed_in(browser, scenario, fresh.key)
    expect(page).to_have_url(re.compile(r"/console/endpoints$"))
    with database.transaction() as s:
        api_key.revoke(s, ADMIN, fresh.id)
    page.reload()
    expect(page).to_have_url(re.compile(r"/console/sign-in\?next=/console/endpoints$"))
    page.context.close()


def test_a_form_without_its_csrf_token_is_refused(browser: Browser, scenario: Scenario) -> None:
    page = signed_in(browser, scenario, scenario.customer_key)
    page.get_by_label("URL").fill(f"{scenario.hook_url}?forged")
    page.locator("form[action$='/console/endpoints'] input[name=csrf]").evaluate("field => field.remove()")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Create endpoint").click()
    assert posted.value.status == 403
    expect(page.locator(".problem")).to_contain_text("CSRF token is missing")
    # A token from another session is refused too, and nothing was created either time.
    forged = page.request.post(f"{scenario.base}/console/endpoints",
                               form={"url": f"{scenario.hook_url}?forged", "csrf": "not-this-sessions-token"})
    assert forged.status == 403
    page.goto("/console/endpoints")
    expect(page.locator("#endpoints")).not_to_contain_text("forged")
    page.context.close()


def test_a_form_with_a_bad_value_is_a_422_page_that_says_what_to_fix(browser: Browser, scenario: Scenario) -> None:
    page = signed_in(browser, scenario, scenario.customer_key)
    page.get_by_label("URL").fill(f"{scenario.hook_url}?bad-schedule")
    page.get_by_label("Retry schedule").fill("0, soon")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Create endpoint").click()
    assert posted.value.status == 422
    expect(page.locator(".problem")).to_contain_text("retry_schedule_s: numbers separated by commas")
    # A subscription with no event type picked, on an endpoint of its own.
    page.goto("/console/endpoints")
    page.get_by_label("URL").fill(f"{scenario.hook_url}?subscribes-badly")
    submitted(page, "Create endpoint")
    page.get_by_role("link", name="Add a subscription").click()
    page.get_by_label("Tenants (comma-separated)").fill(TENANT)
    page.get_by_role("button", name="Create subscription").click()
    expect(page.locator(".problem")).to_contain_text("event_types")
    page.goto("/console/endpoints")
    expect(page.locator("#endpoints")).not_to_contain_text("bad-schedule")
    page.context.close()


def paged_to(page: Page, text: str, container: str = "table") -> Locator:
    """The list ``container`` on the page of a paged list that holds ``text``: the other
    tests of the session share the registry, and their rows may come first."""
    while text not in page.locator(container).first.inner_text() and page.locator("a.next").count():
        page.locator("a.next").first.click()
    return page.locator(container).first


def test_an_operator_sees_the_platform_and_re_enables_a_quarantined_rule(
        browser: Browser, scenario: Scenario, screenshots: Path) -> None:
    page = signed_in(browser, scenario, scenario.admin_key)
    expect(page).to_have_url(re.compile(r"/console/customers$"))
    page.goto("/console/tenants")
    expect(paged_to(page, TENANT)).to_contain_text(TENANT)
    page.goto("/console/event-types")
    expect(paged_to(page, EVENT_TYPE)).to_contain_text(EVENT_TYPE)

    scenario.produce(["con-op-0"])  # the delivery job has read its topic at least once
    page.goto("/console/jobs")
    delivery = page.locator("tr.job.delivery")
    expect(delivery).to_contain_text("up")
    expect(page.locator("tr.job.retries")).to_contain_text("not running")
    # From the job's own progress gauges: its input rate and how far behind its topic it is.
    expect(delivery.locator("td").nth(2)).to_have_text(re.compile(r"^\d+\.\d/s$"), timeout=WAIT_MS)
    expect(delivery.locator("td.lag")).to_contain_text(f"{TOPIC}: 0", timeout=WAIT_MS)
    page.screenshot(path=screenshots / "jobs.png", full_page=True)

    page.goto("/console/rules")
    paged_to(page, "con-big-orders")
    row = page.locator("tr.rule", has_text="con-big-orders")
    expect(row).to_contain_text("quarantined")
    expect(row).to_contain_text("state budget exceeded")
    expect(row.locator("td")).to_have_text([re.compile("con-big-orders"), "filter", "con.big-orders",
                                            re.compile("quarantined"), "1200", "37", "2.500 s", "0", "2",
                                            re.compile("Re-enable")])
    expect(page.locator("tr.job.rules")).to_have_count(0)  # the rules page, not the jobs page
    page.screenshot(path=screenshots / "rules.png", full_page=True)
    with page.expect_navigation():
        row.get_by_role("button", name="Re-enable").click()
    paged_to(page, "con-big-orders")
    expect(page.locator("tr.rule", has_text="con-big-orders")).to_contain_text("running")

    page.goto("/console/reconciliations")
    paged_to(page, "con-orders", "main")
    recon = page.locator("section.recon", has_text="con-orders")
    expect(recon).to_contain_text("98.50 %")
    expect(recon).to_contain_text("100.00 %")
    page.screenshot(path=screenshots / "reconciliations.png", full_page=True)
    page.context.close()


def test_every_page_fits_a_narrow_screen(browser: Browser, scenario: Scenario, screenshots: Path) -> None:
    page = signed_in(browser, scenario, scenario.admin_key, viewport={"width": 390, "height": 844})
    for path in ("/console/endpoints", "/console/subscriptions", "/console/attempts", "/console/dead-letters",
                 "/console/customers", "/console/tenants", "/console/event-types", "/console/jobs", "/console/rules",
                 "/console/reconciliations", f"/console/endpoints/{scenario.other_endpoint_id}"):
        page.goto(path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than the screen"
    page.screenshot(path=screenshots / "narrow-endpoint.png", full_page=True)
    page.context.close()
