"""`wayline receive`: a signature-checking receiver on 127.0.0.1, as its own process."""

import os
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import httpx
import orjson
import pytest
from standardwebhooks import Webhook

from tests.waiting import wait_for
from wayline.core.secret import Secret
from wayline.registry.access import ADMIN
from wayline.registry.endpoint import EndpointIn
from wayline.stack.process import free_port

WAYLINE = str(Path(sys.executable).with_name("wayline"))


def signed(secret: str, body: bytes, msg_id: str = "msg_1") -> dict[str, str]:
    stamp = datetime.now(timezone.utc)
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(stamp.timestamp())),
            "webhook-signature": Webhook(secret).sign(msg_id, stamp, body.decode()),
            "content-type": "application/json"}


def event() -> bytes:
    return orjson.dumps({"id": "e1", "type": "t", "time": datetime.now(timezone.utc).isoformat()})


def start(args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    # Ctrl-C's default action even when the suite itself runs with SIGINT ignored (as a
    # background job of a non-interactive shell), which a child would inherit.
    process = subprocess.Popen([WAYLINE, "receive", "--port", str(port), *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "200", **(env or {})},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            httpx.get(f"{base}/stats")
            return True
        except httpx.TransportError:
            assert process.poll() is None, process.communicate()[0]
            return False

    try:
        wait_for(answers, "wayline receive to answer", 60)
    except AssertionError:
        process.kill()
        raise
    return process, base


def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    return " ".join(output.split())


def test_it_checks_signatures_with_the_secrets_given_and_prints_counts() -> None:
    secret = Secret.generate().text
    process, base = start(["--secret", f"/hooks={secret}"])
    try:
        body = event()
        good = httpx.post(f"{base}/hooks", content=body, headers=signed(secret, body))
        forged = httpx.post(f"{base}/hooks", content=body, headers=signed(Secret.generate().text, body))
        stats = httpx.get(f"{base}/stats").json()
    finally:
        output = stop(process)
    assert (good.status_code, forged.status_code) == (204, 401)
    assert stats["/hooks"]["requests"] == 2 and stats["/hooks"]["rejected"] == 1 and stats["/hooks"]["events"] == 1
    assert "received 2 requests (1 events), 1 with a bad signature" in output


def test_a_malformed_secret_option_is_a_usage_error() -> None:
    result = subprocess.run([WAYLINE, "receive", "--secret", "whsec_nopath"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2 and "PATH=SECRET" in " ".join(result.stderr.split())


@pytest.mark.integration
def test_without_secrets_it_trusts_the_registrys_endpoints_at_its_address(settings, database) -> None:
    from wayline.registry import customer
    from wayline.registry.endpoint import EndpointService

    service = EndpointService.from_settings(settings.model_copy(update={
        "registry": settings.registry.model_copy(update={"url_allow_list": ["127.0.0.1/32"]})}))
    process, base = start([], env={"WAYLINE_STATE_DIR": str(settings.state_dir)})
    try:
        with database.transaction() as session:
            owner = customer.create(session, ADMIN, customer.CustomerIn(name="receive test")).id
            made = service.create(session, ADMIN, EndpointIn(url=f"{base}/from-registry", customer_id=owner))
            [secret] = [s.secret for s in service.secrets(session, ADMIN, made.id)]

        def trusted() -> bool:
            body = event()
            return httpx.post(f"{base}/from-registry", content=body, headers=signed(secret, body)).status_code == 204

        # It looks at the registry every few seconds.
        wait_for(trusted, "the receiver to trust the new endpoint's secret", 30, every_s=1)
        stats = httpx.get(f"{base}/stats").json()["/from-registry"]
    finally:
        output = stop(process)
    assert stats["events"] == 1 and stats["requests"] - stats["rejected"] == 1
    assert "/from-registry" in output
