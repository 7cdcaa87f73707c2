"""The local receiver's totals: counted per prefix, latency quantiles per event-time window,
client connections per path."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx
import orjson

from wayline.core.secret import Secret
from wayline.delivery.signing import signed_headers
from wayline.stack.receiver import Receiver, ReceiverServer


def post(url: str, path: str, secret: Secret, event_id: str, sent: float, client: httpx.Client | None = None) -> None:
    """One signed event; on ``client``'s kept-alive connections, or on a connection of its own."""
    body = orjson.dumps({"id": event_id, "time": datetime.fromtimestamp(sent, UTC).isoformat()})
    headers = signed_headers(f"msg_{event_id}", int(time.time()), body, [secret]) | {
        "content-type": "application/json"}
    send = client.post if client is not None else httpx.post
    assert send(f"{url}{path}", content=body, headers=headers).status_code == 204


def test_totals_sum_the_paths_under_a_prefix_and_take_quantiles_in_the_window_asked() -> None:
    secret = Secret.generate()
    paths = ["/run/job/0", "/run/job/1", "/run/plain/0"]
    server = ReceiverServer(Receiver({path: [secret.text] for path in paths}))
    try:
        now = time.time()
        # Old events (about 100 s late) and fresh ones (well under 100 s) on two paths of one prefix.
        for n in range(10):
            post(server.url, paths[n % 2], secret, f"old-{n}", now - 100)
            post(server.url, paths[n % 2], secret, f"new-{n}", now)
        post(server.url, paths[2], secret, "other", now - 1000)

        everything = httpx.get(f"{server.url}/totals", params={"prefix": "/run/job/"}).json()
        fresh = httpx.get(f"{server.url}/totals", params={"prefix": "/run/job/", "sent_from": now - 50}).json()
        stale = httpx.get(f"{server.url}/totals", params={"prefix": "/run/job/", "sent_to": now - 50}).json()
        bad = httpx.get(f"{server.url}/totals", params={"sent_from": "soon"})
    finally:
        server.close()

    assert (everything["requests"], everything["events"], everything["rejected"]) == (20, 20, 0)
    assert everything["latency_samples"] == 20 and everything["latency_p99_s"] >= 100
    assert fresh["latency_samples"] == 10 and fresh["latency_p99_s"] < 50
    assert stale["latency_samples"] == 10 and stale["latency_p50_s"] >= 100
    assert everything["first_at"] <= everything["last_at"]
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad_window"


def test_connections_count_each_client_connection_once_per_path_and_once_under_a_prefix() -> None:
    secret = Secret.generate()
    server = ReceiverServer(Receiver({path: [secret.text] for path in ("/c/a", "/c/b")}))
    try:
        now = time.time()
        with httpx.Client() as kept:  # one kept-alive connection for all four requests
            for n in range(3):
                post(server.url, "/c/a", secret, f"kept-{n}", now, kept)
            post(server.url, "/c/b", secret, "kept-b", now, kept)
        for n in range(2):  # a connection each
            post(server.url, "/c/a", secret, f"fresh-{n}", now)
        stats = httpx.get(f"{server.url}/stats").json()
        totals = httpx.get(f"{server.url}/totals", params={"prefix": "/c/"}).json()
    finally:
        server.close()

    assert (stats["/c/a"]["requests"], stats["/c/a"]["connections"]) == (5, 3)
    assert (stats["/c/b"]["requests"], stats["/c/b"]["connections"]) == (1, 1)
    assert (totals["requests"], totals["connections"]) == (6, 3)


def test_the_last_minute_keeps_batch_and_streaming_endpoints_apart_and_forgets_older_arrivals() -> None:
    secret = Secret.generate()
    server = ReceiverServer(Receiver({path: [secret.text] for path in ("/s", "/b")}))
    try:
        now = time.time()
        for n in range(4):
            post(server.url, "/s", secret, f"single-{n}", now - 0.5 if n else now - 30)
        events = [{"id": f"b{n}", "time": datetime.fromtimestamp(now - 2, UTC).isoformat()} for n in range(3)]
        body = orjson.dumps(events)
        headers = signed_headers("msg_batch", int(time.time()), body, [secret]) | {
            "content-type": "application/cloudevents-batch+json"}
        assert httpx.post(f"{server.url}/b", content=body, headers=headers).status_code == 204
        recent = server.receiver.recent()
        # Seen from 61 s later, the window has moved past every arrival.
        later = server.receiver.recent(now=time.time() + 61)
    finally:
        server.close()
    assert recent["streaming"]["events"] == 4 and recent["batch"]["events"] == 3
    assert 0.5 <= recent["streaming"]["latency_p50_s"] < 2 and recent["streaming"]["latency_p99_s"] >= 30
    assert 2 <= recent["batch"]["latency_p50_s"] < 5
    assert later == {mode: {"events": 0, "latency_p50_s": None, "latency_p99_s": None}
                     for mode in ("streaming", "batch")}
