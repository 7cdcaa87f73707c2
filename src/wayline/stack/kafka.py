"""A single-node Kafka 4 broker in KRaft combined mode, run from the jars Maven fetched."""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import uuid
from dataclasses import dataclass

from wayline.core.errors import MissingJarsError, StackError
from wayline.core.settings import Settings
from wayline.stack.logs import write_log4j2_config
from wayline.stack.process import free_port, spawn, stop_pid, wait_until

# A static voter set (rather than `format --standalone`) keeps the controller's address
# out of the stored metadata, so each start may pick fresh free ports on the same data.
_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={data_dir}
num.partitions={partitions}
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=168
"""

@dataclass(frozen=True)
class RunningBroker:
    pid: int
    bootstrap: str


def _classpath(settings: Settings) -> str:
    jars_dir = settings.stack.broker_jars_dir
    if not any(jars_dir.glob("kafka_2.13-*.jar")):
        raise MissingJarsError(
            f"no Kafka broker jars in {jars_dir.resolve()}: run `make jars` in the Wayline checkout "
            "(or point WAYLINE_STACK__BROKER_JARS_DIR at the folder Maven filled)"
        )
    return str(jars_dir.resolve() / "*")


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise StackError("`java` is not on PATH; install Java 17 (the broker and Spark need it)")
    return java


def start_broker(settings: Settings) -> RunningBroker:
    home = (settings.state_dir / "kafka").resolve()
    data_dir = home / "data"
    log_dir = (settings.state_dir / "logs").resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    port, controller_port = free_port(), free_port()
    properties = home / "server.properties"
    properties.write_text(
        _SERVER_PROPERTIES.format(
            port=port,
            controller_port=controller_port,
            data_dir=data_dir,
            partitions=settings.kafka.topic_partitions,
        )
    )
    log_file = log_dir / "kafka.log"
    log4j = write_log4j2_config(home / "log4j2.properties", log_file, "INFO",
                                {"kafka": "WARN", "org.apache.kafka": "WARN"})
    java, classpath = _java(), _classpath(settings)

    if not (data_dir / "meta.properties").exists():
        # `=` form: an id may start with "-", which a separate argument would turn into an option.
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        formatted = subprocess.run(
            [java, "-cp", classpath, f"-Dlog4j2.configurationFile={log4j}",
             "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "--config", str(properties)],
            capture_output=True, text=True, timeout=120,
        )
        if formatted.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{formatted.stdout}{formatted.stderr}")

    pid = spawn(
        [java, f"-Xmx{settings.stack.broker_heap}", "-Xms256m", "-XX:+UseG1GC",
         "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log4j}",
         "-cp", classpath, "kafka.Kafka", str(properties)],
        log_dir / "kafka.out",
    )
    bootstrap = f"127.0.0.1:{port}"
    try:
        wait_until(
            lambda: _answers(bootstrap),
            timeout_s=settings.stack.start_timeout_s, pid=pid, what="Kafka broker", log_file=log_file,
        )
    except StackError:
        stop_pid(pid, timeout_s=settings.stack.stop_timeout_s)
        raise
    return RunningBroker(pid=pid, bootstrap=bootstrap)


def _answers(bootstrap: str) -> bool:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    host, port = bootstrap.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return False  # not listening yet; asking librdkafka now would only fill the terminal
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000})
    try:
        metadata = admin.list_topics(timeout=2)
    except KafkaException:
        return False
    return bool(metadata.brokers)


def stop_broker(pid: int, settings: Settings) -> None:
    stop_pid(pid, timeout_s=settings.stack.stop_timeout_s)



__all__ = ["RunningBroker", "start_broker", "stop_broker"]
