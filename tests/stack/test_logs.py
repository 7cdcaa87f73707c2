"""A job's log file takes everything written to standard error while its live view runs."""

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.waiting import wait_for
from wayline.stack.logs import job_log


def polled_until_logged(producer: Producer, log_file: Path, text: str) -> None:
    def logged() -> bool:
        producer.poll(0.1)
        return text in log_file.read_text()

    wait_for(logged, f"{text!r} in the log", 30, every_s=0)


def test_native_child_and_python_stderr_go_to_the_job_log(tmp_path, capfd: pytest.CaptureFixture[str]) -> None:
    log_file = tmp_path / "logs" / "delivery.log"
    with job_log(log_file):
        # librdkafka logs from its own threads straight to file descriptor 2: a broker nobody runs.
        producer = Producer({"bootstrap.servers": "127.0.0.1:9", "reconnect.backoff.max.ms": 100})
        polled_until_logged(producer, log_file, "%3|")
        del producer
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('worker chatter\\n')"], check=True)
        logging.getLogger("wayline.pipelines.delivery").info("a job's own record")
    captured = capfd.readouterr()
    written = log_file.read_text()
    assert "%3|" in written and "rdkafka" in written
    assert "worker chatter" in written and "a job's own record" in written
    assert captured.err == "" and captured.out == ""

    sys.stderr.write("after the job\n")  # the terminal has its standard error back
    assert capfd.readouterr().err == "after the job\n"
    assert "after the job" not in log_file.read_text()
