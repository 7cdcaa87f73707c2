"""The console's pages as a new user reads them, in headless Chromium and over HTTP: the
real admin app with the console on 127.0.0.1 and the real PostgreSQL, no Spark. The jobs'
metrics come from a real metrics server for the delivery job; the other jobs are not
running (nothing listens at their ports)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import orjson
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.api.servers import served
from wayline.core.metrics import serve_metrics
from wayline.core.progress import Collectors, QueryProgress
from wayline.core.settings import Settings
from wayline.delivery.metrics import DeliveryMetrics
from wayline.delivery.storage.store import AttemptLogEntry, DeliveryLogEntry
from wayline.recon import reconciliation, store
from wayline.recon.figures import Counts
from wayline.registry import api_key, catalog, customer, rule
from wayline.registry.access import ADMIN
from wayline.registry.endpoint import EndpointIn, EndpointService
from wayline.stack.process import free_port

pytestmark = pytest.mark.integration

ORDER_CREATED, ORDER_PAID = "pg.order.created", "pg.order.paid"
TENANT = "pg-t"
CUSTOMER_NAME = "Pages Co"
LONG_URL = "http://127.0.0.1:9/hooks/warehouse-eu-west/orders/created?token=a1b2c3d4e5f6"
HELD_ROWS = 300
WINDOW = datetime(2026, 11, 24, 14, 0, tzinfo=UTC)


class Query:
    """A streaming query as QueryProgress reads it: its last progress only."""

    def __init__(self, progress: dict) -> None:
        self.lastProgress = progress


@dataclass
class Site:
    base: str
    customer_key: str
    admin_key: str
    endpoint_id: str
    rule_name: str
    recon_name: str
    retries_url: str


@pytest.fixture(scope="module")
def site(api_settings: Settings, database, admin_key: str) -> Iterator[Site]:
    from wayline.api.app import create_app
    from wayline.console.app import install

    unique = uuid.uuid4().hex[:8]
    # The delivery job as it reports itself: 42 micro-batches of its query, the last 0.56 s;
    # its own batch counter says 0 (with the senders engine its query sends nothing itself).
    progress = QueryProgress()
    progress.watch(lambda: [Query({"name": "wayline-delivery", "batchId": 41, "batchDuration": 560,
                                   "inputRowsPerSecond": 3.0, "sources": []})])
    delivery_metrics = serve_metrics(Collectors(DeliveryMetrics(), progress), "127.0.0.1", 0,
                                     "WAYLINE_DELIVERY__METRICS_PORT")
    retries_port = free_port()
    settings = api_settings.model_copy(update={
        "delivery": api_settings.delivery.model_copy(update={
            "metrics_port": delivery_metrics.server.server_port, "retry_metrics_port": retries_port,
            "retry_schedule_s": [0.0, 5.0, 300.0]}),
        "rules": api_settings.rules.model_copy(update={"metrics_port": free_port()}),
        "recon": api_settings.recon.model_copy(update={"metrics_port": free_port()}),
        "console": api_settings.console.model_copy(update={"page_size": 500}),
    })
    endpoints = EndpointService.from_settings(settings)
    with database.transaction() as s:
        catalog.upsert_tenants(s, ADMIN, [catalog.TenantIn(id=TENANT)])
        for name, description in ((ORDER_CREATED, "an order was placed"), (ORDER_PAID, "an order was paid")):
            catalog.create_event_type(s, ADMIN, catalog.EventTypeIn(name=name, description=description))
        owner = customer.create(s, ADMIN, customer.CustomerIn(name=CUSTOMER_NAME, tenants=[TENANT]))
        key = api_key.create(s, ADMIN, api_key.ApiKeyIn(name="pages", scope="customer", customer_id=owner.id)).key
        endpoint = endpoints.create(s, ADMIN, EndpointIn(url=LONG_URL, customer_id=owner.id,
                                                         description="orders to the EU warehouse"))
        running = rule.create(s, ADMIN, rule.RuleIn(
            name=f"pg-rule-{unique}", sql="SELECT id FROM events WHERE data.amount > 100",
            output_topic="pg.big-orders", output_type="pg.big-order"), rule.RulePolicy.from_settings(settings))
        recon = reconciliation.create(s, ADMIN, reconciliation.ReconciliationIn.model_validate({
            "name": f"pg-recon-{unique}", "expected": {"role": "producer-expected", "topics": ["pg.audit"]},
            "actual": {"role": "actual", "topics": ["events.pg.orders"]},
            "periods": {"o": 60, "n": 10, "m": 600, "z": 60},
        }), reconciliation.OutputTopics.from_settings(settings))
        store.apply_batch(s, f"pages-{unique}", 0, {recon.id: 60_000}, {recon.id: 10_000}, [
            store.WindowChange(recon.id, "/pages-test", int(WINDOW.timestamp() * 1000),
                               Counts(expected=10, matched=9, missing=1))], {}, [])
        # The endpoint's log: a success and a failure (in buckets of their own), and a hanging endpoint's
        # pile of held-back deliveries (not sent: its circuit was open) after them.
        now = datetime.now(UTC)
        common = {"endpoint_id": endpoint.id, "subscription_id": "sub_pages"}
        s.add(DeliveryLogEntry(**common, webhook_id=f"msg_pg_ok_{unique}", status=204, attempt=1, latency_ms=12,
                               delivered_at=now - timedelta(minutes=30), event_type=ORDER_CREATED))
        s.add(AttemptLogEntry(**common, webhook_id=f"msg_pg_fail_{unique}", attempt=1, status=500,
                              error="HTTP 500: receiver down for maintenance", latency_ms=40,
                              attempted_at=now - timedelta(minutes=15), event_type=ORDER_PAID))
        s.add_all(AttemptLogEntry(**common, webhook_id=f"msg_pg_held_{unique}_{n}", attempt=2, status=None,
                                  error="circuit open", latency_ms=0, held_back=True, event_type=ORDER_PAID,
                                  attempted_at=now - timedelta(minutes=10) + timedelta(seconds=n))
                  for n in range(HELD_ROWS))
    try:
        with served(install(create_app(settings, database))) as base:
            yield Site(base, key, admin_key, endpoint.id, running.name, recon.name,
                       f"http://{settings.delivery.metrics_host}:{retries_port}/metrics")
    finally:
        delivery_metrics.close()


def signed_in(browser: Browser, site: Site, key: str, **options) -> Page:
    page = browser.new_context(base_url=site.base, **options).new_page()
    page.set_default_timeout(30_000)
    page.goto("/console/sign-in")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page).not_to_have_url(re.compile(r"/sign-in"))
    return page


def test_signing_out_ends_the_session_on_the_server(browser: Browser, site: Site) -> None:
    page = signed_in(browser, site, site.customer_key)
    kept = {c["name"]: c["value"] for c in page.context.cookies()}
    with httpx.Client(base_url=site.base, cookies=kept) as copy:
        assert copy.get("/console/endpoints").status_code == 200  # the copy works while signed in
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(re.compile(r"/console/sign-in$"))
        answer = copy.get("/console/endpoints")
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/console/sign-in?next=")
    page.context.close()


def test_the_header_names_the_customer(browser: Browser, site: Site) -> None:
    page = signed_in(browser, site, site.customer_key)
    expect(page.locator("header .who")).to_have_text(CUSTOMER_NAME)
    page.context.close()


def test_an_unknown_console_url_is_a_console_page(browser: Browser, site: Site) -> None:
    page = signed_in(browser, site, site.customer_key)
    answer = page.goto("/console/no-such-page?x=1")
    assert answer is not None and answer.status == 404
    assert answer.headers["content-type"].startswith("text/html")
    expect(page.locator("h1")).to_have_text("Not found")
    expect(page.locator(".problem")).to_contain_text("the console has no page at /console/no-such-page")
    expect(page.get_by_role("link", name="Endpoints")).to_be_visible()  # the console's own navigation
    page.context.close()
    # Without a session too, and for any method: never the API's JSON.
    posted = httpx.post(f"{site.base}/console/endpoints/a/b/c")
    assert posted.status_code == 404 and posted.headers["content-type"].startswith("text/html")


def test_a_rule_is_not_shown_running_while_the_rules_job_is_down(browser: Browser, site: Site) -> None:
    page = signed_in(browser, site, site.admin_key)
    page.goto("/console/rules")
    row = page.locator("tr.rule", has_text=site.rule_name)
    expect(row.locator("td").nth(3)).to_contain_text("not running")
    expect(row.locator(".ok")).to_have_count(0)
    expect(page.locator("#rules-job")).to_contain_text("The rules job is not running (nothing listens at http://")
    page.context.close()


def test_the_jobs_page_says_what_is_not_running_and_counts_micro_batches_truly(
        browser: Browser, site: Site, screenshots: Path) -> None:
    page = signed_in(browser, site, site.admin_key)
    page.goto("/console/jobs")
    delivery, retries = page.locator("tr.job.delivery td"), page.locator("tr.job.retries")
    headers = page.locator("#jobs th").all_inner_texts()
    assert headers[4:6] == ["Micro-batches", "Last micro-batch"]
    expect(delivery.nth(4)).to_have_text("42")
    expect(delivery.nth(5)).to_have_text("0.560 s")
    expect(retries.locator("td.state span")).to_have_text("not running")
    expect(retries.locator("td.state small")).to_have_text(f"nothing listens at {site.retries_url}")
    expect(page.locator("#jobs")).not_to_contain_text("Errno")
    page.screenshot(path=screenshots / "pages-jobs.png", full_page=True)
    page.context.close()


def test_reconciliation_windows_read_as_times_with_their_zone(browser: Browser, site: Site) -> None:
    page = signed_in(browser, site, site.admin_key)
    page.goto("/console/reconciliations")
    recon = page.locator("section.recon", has_text=site.recon_name)
    expect(recon.locator("td.window")).to_have_text("2026-11-24 14:00 – 14:01 UTC")
    expect(recon).to_contain_text("90.00 %")
    page.context.close()


def test_the_endpoint_page_labels_the_first_attempt_and_draws_the_charts_axes(
        browser: Browser, site: Site, screenshots: Path) -> None:
    page = signed_in(browser, site, site.customer_key)
    page.goto(f"/console/endpoints/{site.endpoint_id}")
    expect(page.locator("ol.schedule li")).to_have_text([
        "attempt 1 as soon as the event arrives", "attempt 2 5 s after attempt 1 failed",
        "attempt 3 5 min after attempt 2 failed"])
    # The success-rate axis, the p95 axis up to the slowest bucket's 40 ms, and the time.
    expect(page.locator("#health .rate-axis")).to_have_text(["0%", "50%", "100%"])
    expect(page.locator("#health .latency-axis")).to_have_text(["0 ms", "20 ms", "40 ms"])
    expect(page.locator("#health .time-axis").first).to_have_text(re.compile(r"^\d\d:\d\d$"))
    assert page.locator("#health .time-axis").count() >= 4
    page.screenshot(path=screenshots / "pages-endpoint.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator("#health").screenshot(path=screenshots / "pages-health-390.png")
    page.context.close()


def test_the_attempt_log_shows_event_types_success_statuses_and_keeps_held_rows_apart(
        browser: Browser, site: Site, screenshots: Path) -> None:
    page = signed_in(browser, site, site.customer_key)
    page.goto(f"/console/attempts?endpoint_id={site.endpoint_id}")
    rows = page.locator("#attempts tr.attempt")
    expect(rows).to_have_count(2)  # the two attempts; the held-back deliveries are counted apart
    expect(page.locator("#attempts th")).to_contain_text(["When (UTC)", "Outcome", "Event type"])
    ok, failed = page.locator("tr.attempt.succeeded"), page.locator("tr.attempt.failed")
    expect(ok.locator("td.event-type")).to_have_text(ORDER_CREATED)
    expect(ok.locator("td.response")).to_have_text("204 No Content")
    expect(failed.locator("td.event-type")).to_have_text(ORDER_PAID)
    expect(failed.locator("td.response")).to_have_text("HTTP 500: receiver down for maintenance")
    note = page.locator("#held-note")
    expect(note).to_contain_text(f"{HELD_ROWS} held-back deliveries")
    page.screenshot(path=screenshots / "pages-attempts.png", full_page=True)
    note.get_by_role("link", name="Show them").click()
    expect(page).to_have_url(re.compile(r"outcome=held"))
    expect(page.locator("#attempts tr.attempt.held")).to_have_count(HELD_ROWS)
    expect(page.locator("#attempts tr.attempt:not(.held)")).to_have_count(0)
    page.context.close()


def test_a_subscription_is_made_by_picking_event_types_from_the_registry(browser: Browser, site: Site) -> None:
    page = signed_in(browser, site, site.customer_key)
    page.goto(f"/console/subscriptions?endpoint_id={site.endpoint_id}")
    picker = page.locator("#event-types")
    expect(picker).to_contain_text("an order was paid")
    picker.locator(f"input[value='{ORDER_CREATED}']").check()
    picker.locator(f"input[value='{ORDER_PAID}']").check()
    page.get_by_label("Tenants (comma-separated)").fill(TENANT)
    page.get_by_role("button", name="Create subscription").click()
    expect(page.locator(".problem")).to_have_count(0)
    expect(page.locator("#subscriptions")).to_contain_text(f"{ORDER_CREATED}, {ORDER_PAID}")
    page.context.close()


def test_the_endpoints_table_is_usable_on_a_phone(browser: Browser, site: Site, screenshots: Path) -> None:
    page = signed_in(browser, site, site.customer_key, viewport={"width": 390, "height": 844})
    page.goto("/console/endpoints")
    url = page.locator("#endpoints td.url").first
    expect(url).to_have_text(LONG_URL)
    # The URL's own text (not its cell's label) gets most of the screen's width, on the screen.
    text = url.evaluate("cell => { const range = document.createRange(); range.selectNodeContents(cell);"
                        " const box = range.getBoundingClientRect(); return {left: box.left, right: box.right}; }")
    assert text["right"] - text["left"] >= 200, f"the URL is {text['right'] - text['left']:.0f}px wide"
    assert 0 <= text["left"] and text["right"] <= 390, f"the URL spans {text} on a 390px screen"
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    page.screenshot(path=screenshots / "pages-endpoints-390.png", full_page=True)
    # The pages this module changed fit the phone's width as well.
    for path, shot in ((f"/console/endpoints/{site.endpoint_id}", "pages-endpoint-390.png"),
                       ("/console/subscriptions", "pages-subscriptions-390.png"),
                       (f"/console/attempts?endpoint_id={site.endpoint_id}", "pages-attempts-390.png")):
        page.goto(path)
        assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0, path
        page.screenshot(path=screenshots / shot, full_page=True)
    page.context.close()


def test_the_raw_attempts_api_carries_the_event_type(site: Site) -> None:
    # The console reads what the API answers: the same field, for scripts.
    answer = httpx.get(f"{site.base}/attempts", params={"endpoint_id": site.endpoint_id, "outcome": "succeeded"},
                       headers={"Authorization": f"Bearer {site.customer_key}"})
    assert answer.status_code == 200, answer.text
    assert [a["event_type"] for a in orjson.loads(answer.content)["data"]] == [ORDER_CREATED]
