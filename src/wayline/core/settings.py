"""The one settings object every part of Wayline reads.

Values come, highest priority first, from keyword arguments, ``WAYLINE_*`` environment
variables (nested fields with ``__``: ``WAYLINE_KAFKA__BOOTSTRAP_SERVERS``), the TOML or
YAML file named by ``WAYLINE_CONFIG``, and the defaults below, which suit a local run.
``wayline.example.toml`` at the repository root documents every value.

Addresses of Kafka and PostgreSQL may be left unset: then the running local stack's
addresses are read from its state file (written by ``wayline up``).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from wayline.core.errors import ConfigError

CONFIG_FILE_ENV = "WAYLINE_CONFIG"
# The retry schedule when neither the deployment nor the endpoint sets one: the delay
# before each attempt (the first at once), about a day in all; ±20% jitter on each.
DEFAULT_RETRY_SCHEDULE_S = (0.0, 5.0, 300.0, 1800.0, 7200.0, 18_000.0, 36_000.0, 36_000.0)
DEFAULT_RETRY_JITTER = 0.2


def _in_checkout(*parts: str) -> Path:
    """A path in the checkout Wayline runs from (an editable install), so commands find the
    repo's `make jars` output from any working directory; elsewhere, relative to it."""
    checkout = Path(__file__).resolve().parents[3]
    return checkout.joinpath(*parts) if (checkout / "pom.xml").is_file() else Path(*parts)


class _Section(BaseModel, frozen=True, extra="forbid"):
    """A group of settings; a misspelt key is an error, not a silent default."""


class KafkaSettings(_Section):
    bootstrap_servers: str | None = Field(
        default=None, description="host:port list; unset means the local stack's broker"
    )
    event_topic_prefix: str = "events."
    alert_topic_prefix: str = Field(
        default="alerts.",
        description="rule output topics under this prefix are read by the delivery job, so customers can "
                    "subscribe to a rule's output type; not under event_topic_prefix, which the rules job reads",
    )
    quarantine_topic: str = "wayline.quarantine"
    quarantine_max_bytes: int = Field(
        default=1_047_552, ge=4096,
        description="a quarantine copy larger than this (as Kafka sizes a record) carries a reference to the "
                    "original instead of its value; default: Kafka's 1 MiB message limit less 1 KiB",
    )
    topic_partitions: int = 2
    max_offsets_per_trigger: int = 200_000
    starting_offsets: str = "earliest"
    # Spark's micro-batch reader polls each partition once more at the end of its offset
    # range, and the broker holds an empty fetch this long: at the default 500 ms a read
    # over many partitions took several times as long
    # (see docs/benchmarks.md#sparks-kafka-reader-fetchmaxwaitms-issue-2--2026-11-22).
    fetch_max_wait_ms: int = 10
    stream_fetch_min_bytes: int = Field(
        default=65_536, ge=1,
        description="readers that never end (the real-time matching read and the sender processes; the intake's "
                    "fetches over many topics are answered at the first byte, see delivery/runtime/intake.py): the "
                    "broker answers a fetch once this many bytes are ready, or after stream_fetch_max_wait_ms; at 1 "
                    "each arriving record woke a poll, whose fixed cost was most of their CPU at a few hundred events/s",
    )
    stream_fetch_max_wait_ms: int = Field(
        default=100, ge=0,
        description="how long the broker holds such a fetch for stream_fetch_min_bytes: the latency each of "
                    "those hops may add when the stream is thin. Each fetch that answers is a poll of the "
                    "real-time read and a stage of a sender process, whose fixed costs (database round trips) "
                    "are the same for 3 records as for 300",
    )
    stream_linger_ms: int = Field(
        default=5, ge=0,
        description="the delivery path's producers (the matching query's Kafka sink, the intake and sender "
                    "processes) gather a batch this long; at 0, Kafka's Java default, the matching query sent "
                    "each record in a request of its own",
    )

    def stream_fetch(self) -> dict[str, int]:
        """The fetch settings of a reader that never ends, in librdkafka's names."""
        return {"fetch.min.bytes": self.stream_fetch_min_bytes, "fetch.wait.max.ms": self.stream_fetch_max_wait_ms}

    @model_validator(mode="after")
    def _prefixes_apart(self) -> KafkaSettings:
        # The rules job reads the event topics: its alerts there would be read back by it.
        if not self.alert_topic_prefix or self.alert_topic_prefix.startswith(self.event_topic_prefix) \
                or self.event_topic_prefix.startswith(self.alert_topic_prefix):
            raise ValueError(f"alert_topic_prefix {self.alert_topic_prefix!r} must be set and must not overlap "
                             f"event_topic_prefix {self.event_topic_prefix!r}")
        return self


class PostgresSettings(_Section):
    dsn: SecretStr | None = Field(
        default=None, description="postgresql:// URL; unset means the local stack's database"
    )
    database: str = "wayline"


class SparkSettings(_Section):
    master: str = "local[2]"
    app_name: str = "wayline"
    shuffle_partitions: int = 2
    driver_memory: str = "2g"
    java_options: str = Field(
        default="", description="options of the driver's JVM (spark.driver.extraJavaOptions, after the log set-up)"
    )
    jars_dir: Path = Field(default_factory=lambda: _in_checkout("jars", "spark"))
    extra_conf: dict[str, str] = Field(default_factory=dict)
    shared_checkpoints: bool = Field(
        default=False,
        description="state_dir is on storage every node of a non-local master sees (NFS, EFS, …); "
                    "unset, a job on such a master refuses a driver-local checkpoint path",
    )
    ship_package: bool = Field(
        default=True, description="on a non-local master, send the wayline package to executors as a zip"
    )


class EnvelopeSettings(_Section):
    max_bytes: int = Field(default=1024, gt=0, description="larger Kafka values are quarantined")
    max_future_skew_s: float = Field(
        default=300.0, gt=0,
        description="an event whose time is further than this ahead of the clock is quarantined (future_time), and "
                    "refused by the messaging API: it would move every watermark past every later event",
    )


class RegistrySettings(_Section):
    encryption_keys: list[SecretStr] = Field(
        default_factory=list,
        description="Fernet keys for secrets at rest, newest first; unset: a key file in state_dir",
    )
    url_allow_list: list[str] = Field(
        default_factory=list,
        description="hosts or CIDR ranges that endpoint URLs may use although private or loopback",
    )
    secret_overlap_s: int = Field(default=86_400, ge=0, description="old signing secret stays valid this long")
    max_page_size: int = 500
    max_filter_bytes: int = Field(
        default=65_536, ge=2, description="a subscription's content filter at most this many bytes of JSON"
    )
    max_filter_depth: int = Field(default=8, ge=1, le=32, description="filter objects nested at most this deep (32 at most)")


class ApiSettings(_Section):
    host: str = "127.0.0.1"
    port: int = 8080
    idempotency_ttl_s: float = Field(
        default=86_400.0, gt=0, description="an Idempotency-Key is remembered (and its replay answered) this long"
    )
    test_event_max_bytes: int = Field(
        default=65_536, ge=2, description="the data of a test event (POST /endpoints/{id}/test) at most this many bytes"
    )
    test_events_per_minute: int = Field(default=10, ge=1, description="test events one endpoint may be sent per minute")
    max_request_bytes: int = Field(
        default=4_194_304, ge=1,
        description="largest request body of the admin API and the console (413 above it, unread): 4 MiB holds the "
                    "largest body the API takes, 10,000 reference-table rows of about 400 bytes",
    )


class ConsoleSettings(_Section):
    session_ttl_s: int = Field(
        default=28_800, ge=60, description="a console sign-in lasts this long; then the API key is asked for again"
    )
    page_size: int = Field(default=50, ge=1, le=500, description="rows per page of the console's lists")
    metrics_timeout_s: float = Field(
        default=1.0, gt=0, description="the jobs view waits this long for each job's /metrics before calling it down"
    )


HttpClientName = Literal["aiohttp", "pyreqwest"]
# The cheaper client per request that passes every transport contract test (docs/decisions.md).
DEFAULT_HTTP_CLIENT: HttpClientName = "pyreqwest"


Trigger = Literal["auto", "realtime", "micro_batch"]


class DeliverySettings(_Section):
    http_client: HttpClientName = Field(
        default=DEFAULT_HTTP_CLIENT,
        description="the HTTP client that sends webhooks: pyreqwest (Rust, less CPU per request than aiohttp) "
                    "or aiohttp; both keep the same address policy, timeouts and no-redirect rule",
    )
    stage_deadline_s: float = Field(
        default=5.0, gt=0, description="a send stage hands what is unfinished by then to the retry store"
    )
    version_poll_s: float = Field(
        default=2.0, gt=0, description="the registry version is read at most this often, between micro-batches"
    )
    trigger_interval_s: float = Field(
        default=0.1, gt=0, description="a micro-batch starts at most this often (and as soon as the last one ends)"
    )
    max_offsets_per_trigger: int = Field(
        default=10_000, ge=1, description="records per micro-batch at most: a backlog goes in short micro-batches"
    )
    send_partitions: int = Field(
        default=2, ge=1, description="tasks the matched pairs are spread over, by endpoint, for sending"
    )
    straggler_cut_s: float = Field(
        default=1.0, gt=0,
        description="once only slow endpoints are left in a send stage, their requests outstanding this long are "
                    "cut and go to the retry path",
    )
    slow_for_s: float = Field(
        default=30.0, gt=0,
        description="an endpoint cut as a straggler is sent to by the retry path only, for this long",
    )
    # The delay before each attempt, from the first (0: at once); the length is the number of attempts.
    retry_schedule_s: list[float] = Field(default_factory=lambda: list(DEFAULT_RETRY_SCHEDULE_S), min_length=1)
    retry_jitter: float = Field(default=DEFAULT_RETRY_JITTER, ge=0, lt=1)
    # Each Python worker's breaker per endpoint; open: requests go to the retry store unsent.
    circuit_consecutive_failures: int = Field(default=5, ge=1, description="this many failures in a row open it")
    circuit_failure_rate: float = Field(
        default=0.5, gt=0, le=1, description="so does this failure rate over the last circuit_window outcomes"
    )
    circuit_window: int = Field(default=100, ge=1)
    circuit_min_calls: int = Field(default=20, ge=1, description="outcomes needed before the rate counts")
    circuit_cool_down_s: float = Field(default=30.0, gt=0, description="open this long, then one probe goes through")
    batch_topic: str = Field(
        default="wayline.delivery.batching",
        description="internal topic: the matching query hands batch-mode leftovers to the batching query",
    )
    batch_shards: int = Field(
        default=4, ge=1, le=64, description="each batch-mode subscription is batched in this many independent shards"
    )
    batch_buckets: int = Field(
        default=16, ge=1, description="stateful-operator keys the batch shards are hashed into"
    )
    batch_trigger_interval_s: float = Field(
        default=1.0, gt=0,
        description="the batching query's micro-batch interval: how late after max_wait a batch may go out",
    )
    batch_remember_s: float = Field(
        default=3600.0, gt=0, description="an idle batch shard's replay guard is kept this long"
    )
    engine: Literal["micro_batch", "senders"] = Field(
        default="senders",
        description="micro_batch: the delivery job matches and sends in one Spark pass per micro-batch; senders: a "
                    "JVM-only matching query writes requests to work_topic and long-lived sender processes send them",
    )
    matching_trigger: Trigger = Field(
        default="auto",
        description="with engine = senders: the matching query runs under Spark's real-time trigger (a busy task "
                    "per source partition), in back-to-back micro-batches coalesced to the cores, or (auto) real-time "
                    "only where the cores cover the source partitions",
    )
    matching_java_options: str = Field(
        default="-XX:TieredStopAtLevel=1",
        description="with engine = senders: spark.java_options of `wayline run delivery`, whose JVM runs only the "
                    "light matching query; C1 alone compiles it in seconds, where C2 kept a core busy for minutes",
    )
    matching_driver_memory: str = Field(
        default="512m",
        description="with engine = senders: spark.driver_memory of `wayline run delivery`, whose JVM runs only the "
                    "matching query: its live heap was 80-95 MB at 1,000 events/s and in a 100,000-event backlog on "
                    "every layout, and G1 grows a heap of 2g to 600-800 MB in its first seconds and keeps it",
    )
    realtime_checkpoint_s: float = Field(
        default=300.0, gt=0,
        description="with matching_trigger = realtime: how long each real-time batch of the matching query lasts, "
                    "between checkpoints of its offsets: each batch's end pauses matching for a second or more, "
                    "and a crash replays what was read since the last checkpoint (delivered requests are not sent "
                    "again); Spark's own default is 5 minutes",
    )
    work_topic: str = Field(
        default="wayline.delivery.work",
        description="internal topic: with engine = senders, the matching query's requests for the sender processes",
    )
    work_partitions: int = Field(
        default=4, ge=1, description="partitions of work_topic: at most this many sender processes share the work"
    )
    intake: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="with engine = senders: intake processes copy every source topic's records onto intake_topic, "
                    "which the matching query reads under the real-time trigger instead; auto: on exactly where the "
                    "source partitions + 1 exceed the cores (where the real-time trigger could not hold them)",
    )
    intake_topic: str = Field(
        default="wayline.delivery.intake",
        description="internal topic: with intake on, the source topics' records as the matching query reads them",
    )
    intake_partitions: int = Field(
        default=0, ge=0,
        description="partitions of intake_topic when it is made; 0: the cores less one, at least 1 (what the "
                    "real-time trigger holds with a slot to spare)",
    )
    intake_processes: int = Field(
        default=1, ge=1, description="with intake on: intake processes `wayline run delivery` starts"
    )
    intake_group: str = Field(
        default="wayline-intake", description="the intake processes' Kafka consumer group on the source topics"
    )
    sender_processes: int = Field(
        default=2, ge=1, description="with engine = senders: sender processes `wayline run delivery` starts"
    )
    sender_group: str = Field(
        default="wayline-senders", description="the sender processes' Kafka consumer group on work_topic"
    )
    sender_metrics_port: int = Field(
        default=0, ge=0, le=65_535,
        description="each sender process's Prometheus /metrics; 0: any free port, logged when the process starts",
    )
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(
        default=9464, ge=0, le=65_535, description="the driver's Prometheus /metrics; 0: any free port"
    )
    defer_failing: bool = Field(
        default=True,
        description="the delivery job hands messages for endpoints whose latest retry failed to the retry path "
                    "unsent, so a hanging endpoint cannot hold its micro-batches until the stage deadline",
    )
    retry_metrics_port: int = Field(
        default=9465, ge=0, le=65_535,
        description="`wayline run retries`' Prometheus /metrics, beside a delivery job on the same host; "
                    "0: any free port",
    )
    retry_poll_s: float = Field(default=1.0, gt=0, description="the retry drain looks for due retries this often")
    retry_claim_limit: int = Field(
        default=1000, ge=1, description="retries the retry drain claims and attempts at once (one stage)"
    )
    retry_lease_s: float = Field(
        default=60.0, gt=0,
        description="a claimed retry is due again after this long if its drainer died; must be above stage_deadline_s",
    )
    disable_after_s: float = Field(
        default=432_000.0, gt=0, description="an endpoint whose retries have all failed this long is disabled (5 days)"
    )
    history_retention_s: float = Field(
        default=2_592_000.0, gt=0,
        description="delivered messages and failed attempts are kept this long for the customer API (30 days)",
    )
    dead_letter_retention_s: float = Field(
        default=2_592_000.0, gt=0, description="a dead letter nobody acknowledged is deleted after this long (30 days)"
    )
    operations_topic: str = Field(
        default="events.wayline.operations",
        description="Wayline's own CloudEvents (endpoint disabled, message dead-lettered); under the event topic "
                    "prefix, so customers can subscribe to them like any event",
    )

    @model_validator(mode="after")
    def _lease_outlives_a_stage(self) -> DeliverySettings:
        # A retry still being sent when its lease ran out would be claimed, and sent, again.
        if self.retry_lease_s <= self.stage_deadline_s:
            raise ValueError(f"retry_lease_s ({self.retry_lease_s:g} s) must be above stage_deadline_s "
                             f"({self.stage_deadline_s:g} s): a retry still being sent when its lease runs out "
                             "is claimed and sent again")
        return self


class RulesSettings(_Section):
    control_topic: str = Field(
        default="wayline.rules.control", description="compacted topic of rule definitions, keyed by rule name"
    )
    control_max_poll_interval_s: float = Field(
        default=300.0, ge=6,
        description="the control topic's consumer leaves its group when not polled this long (librdkafka's "
                    "max.poll.interval.ms; its session timeout is at most this, and at least the broker's 6 s): "
                    "the job polls it at least three times as often, idle or not",
    )
    version_poll_s: float = Field(
        default=1.0, gt=0,
        description="the rules version, and the versions of the reference tables join rules read, are read at most "
                    "this often",
    )
    join_starting_offsets: Literal["latest", "earliest"] = Field(
        default="latest",
        description="where a new join rule's query starts reading the event topics (its own query, restarted on its "
                    "checkpoint afterwards): latest, as a rule deployed into the running job applies from then on",
    )
    trigger_interval_s: float = Field(default=0.5, gt=0, description="a micro-batch starts at most this often")
    allowed_lateness_s: float = Field(
        default=5.0, ge=0, description="the watermark trails the newest event time by this much"
    )
    shards: int = Field(
        default=8, ge=1,
        description="stateful operator groups per set of partition-key columns, each holding many partition keys, "
                    "numbered so that the shuffle partitions get as many each; a checkpoint keeps the number it "
                    "started with (one started before this was recorded: 64, or the value set then)",
    )
    default_state_budget: int = Field(default=1_000_000, ge=1, description="state entries a rule may hold")
    default_time_budget_ms: int = Field(default=2_000, ge=1, description="evaluation time a rule may use per micro-batch")
    output_partitions: int = Field(default=2, ge=1, description="partitions of an output topic the job creates")
    max_windows_per_event: int = Field(
        default=1_000, ge=1, description="a hopping window's size / slide at most: each event joins that many windows"
    )
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(
        default=9466, ge=0, le=65_535, description="the rules job's Prometheus /metrics, per rule; 0: any free port"
    )


class MessagingSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8081, ge=0, le=65_535, description="`wayline serve messaging`'s port")
    instance_id: str = Field(
        default_factory=socket.gethostname, pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="names this instance in transaction ids and transactional producer ids; unique per instance "
                    "and stable across its restarts (a restart then fences the old producers)",
    )
    max_batch_events: int = Field(default=1000, ge=1, description="events one publish request may carry")
    max_request_bytes: int = Field(
        default=1_048_576, ge=1,
        description="largest request body of the messaging API (413 above it, unread; under `wayline serve` this "
                    "bounds publishes and api.max_request_bytes the rest): 1 MiB holds a batch of 500 events of up "
                    "to 1 KiB each (envelope.max_bytes) with half of it to spare",
    )
    linger_ms: float = Field(default=5.0, ge=0, description="the producer waits this long to fill a batch")
    delivery_timeout_ms: int = Field(
        default=30_000, ge=1000, description="a record the broker has not acknowledged by then fails with its reason"
    )
    idempotency_pending_s: float = Field(
        default=60.0, gt=0,
        description="a publish with an Idempotency-Key still unanswered after this long (its instance died) may be "
                    "retried; until then a repeat gets 409",
    )
    schema_cache_s: float = Field(default=5.0, ge=0, description="event type JSON Schemas are re-read this often")
    auth_cache_s: float = Field(
        default=2.0, ge=0, description="an API key and its topic grants are re-read this often (revocation delay)"
    )
    transaction_producers: int = Field(
        default=4, ge=1, description="transactional producers per instance: open transactions it can hold at once"
    )
    transactions_per_key: int = Field(
        default=2, ge=1,
        description="open transactions one API key may hold on an instance; more get 429, so one key cannot "
                    "take every transactional producer",
    )
    transaction_timeout_s: float = Field(
        default=60.0, gt=0, description="a transaction neither committed nor aborted by then is aborted"
    )
    poll_consumers: int = Field(default=4, ge=1, description="concurrent polls per instance; more wait their turn")
    poll_max_limit: int = Field(default=1000, ge=1, description="most records one poll returns")
    poll_max_bytes: int = Field(default=1_048_576, ge=1, description="most value bytes one poll returns")
    poll_max_wait_s: float = Field(default=30.0, ge=0, description="longest long-poll wait a request may ask for")
class ReconSettings(_Section):
    output_topic: str = Field(
        default="wayline.recon.events",
        description="missing, found and metrics events, unless a reconciliation names its own",
    )
    heartbeat_type: str = Field(
        default="wayline.recon.heartbeat",
        description="events of this type on a reconciliation's topics only move its watermark",
    )
    tenant: str = Field(default="wayline", description="the tenantid of the events the recon job emits")
    buckets: int = Field(
        default=16, ge=1, le=1024, description="stateful-operator keys per reconciliation; each holds many ids"
    )
    trigger_interval_s: float = Field(
        default=10.0, gt=0,
        description="a micro-batch starts at most this often (one runs on every trigger, data or not); verdicts "
                    "come per window and n seconds after, so this only adds up to its length to them",
    )
    version_poll_s: float = Field(
        default=2.0, gt=0, description="the reconciliations' version is read at most this often"
    )
    output_partitions: int = Field(default=2, ge=1, description="partitions of an output topic the job creates")
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(
        default=9467, ge=0, le=65_535, description="the recon job's Prometheus /metrics; 0: any free port"
    )


class AuditSettings(_Section):
    """The delivery self-audit: what the delivery job writes, and the built-in reconciliation over it."""

    enabled: bool = Field(default=True, description="the delivery job writes its audit records")
    consumed_topic: str = Field(
        default="wayline.audit.consumed", description="one CloudEvent per Kafka record the delivery job consumed"
    )
    outcomes_topic: str = Field(
        default="wayline.audit.outcomes", description="one CloudEvent per consumed record's final outcome"
    )
    o_s: float = Field(default=60.0, gt=0, description="the self-audit's metrics interval")
    n_s: float = Field(default=60.0, gt=0, description="a consumed record with no outcome this long after is missing")
    z_s: float = Field(default=300.0, gt=0, description="processing time a stalled self-audit watermark waits")


class StackSettings(_Section):
    broker_jars_dir: Path = Field(default_factory=lambda: _in_checkout("jars", "broker"))
    broker_heap: str = "1g"
    start_timeout_s: float = 90.0
    stop_timeout_s: float = 30.0
    service_dir: Path = Field(
        default=Path("/var/lib/wayline"),
        description="run by root, the local PostgreSQL's binaries and data live here, owned by its system user",
    )


class ClusterSettings(_Section):
    """The local Spark standalone cluster of `wayline cluster up`."""

    workers: int = Field(default=2, ge=1, description="worker processes, each its own JVM")
    worker_cores: int = Field(default=1, ge=1, description="cores each worker offers to executors")
    worker_memory: str = Field(default="1g", description="memory each worker offers to executors")
    daemon_heap: str = Field(default="256m", description="heap of the master and worker JVMs themselves")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="WAYLINE_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    state_dir: Path = Path(".wayline")
    kafka: KafkaSettings = KafkaSettings()
    postgres: PostgresSettings = PostgresSettings()
    spark: SparkSettings = SparkSettings()
    envelope: EnvelopeSettings = EnvelopeSettings()
    registry: RegistrySettings = RegistrySettings()
    api: ApiSettings = ApiSettings()
    console: ConsoleSettings = ConsoleSettings()
    delivery: DeliverySettings = DeliverySettings()
    stack: StackSettings = StackSettings()
    rules: RulesSettings = RulesSettings()
    messaging: MessagingSettings = MessagingSettings()
    recon: ReconSettings = ReconSettings()
    audit: AuditSettings = AuditSettings()
    cluster: ClusterSettings = ClusterSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if config_file:
            path = Path(config_file)
            if not path.is_file():
                raise ConfigError(f"{CONFIG_FILE_ENV}={config_file} does not name a file")
            if path.suffix == ".toml":
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
            elif path.suffix in (".yaml", ".yml"):
                sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
            else:
                raise ConfigError(f"{CONFIG_FILE_ENV}={config_file}: use a .toml, .yaml or .yml file")
        return tuple(sources)

    @property
    def stack_file(self) -> Path:
        """Where `wayline up` records the addresses and pids of the local stack."""
        return self.state_dir / "stack.json"

    @property
    def checkpoint_root(self) -> Path:
        return self.state_dir / "checkpoints"

    def kafka_bootstrap(self) -> str:
        if self.kafka.bootstrap_servers:
            return self.kafka.bootstrap_servers
        return str(self._from_stack("kafka_bootstrap", "WAYLINE_KAFKA__BOOTSTRAP_SERVERS"))

    def postgres_dsn(self) -> str:
        if self.postgres.dsn is not None:
            return self.postgres.dsn.get_secret_value()
        return str(self._from_stack("postgres_dsn", "WAYLINE_POSTGRES__DSN"))

    def _from_stack(self, key: str, env_name: str) -> Any:
        try:
            recorded = json.loads(self.stack_file.read_text())
        except FileNotFoundError:
            raise ConfigError(
                f"no {key.replace('_', ' ')} configured and no local stack at {self.stack_file}: "
                f"run `wayline up` or set {env_name}"
            ) from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{self.stack_file} is corrupt ({exc}); run `wayline down` then `wayline up`") from exc
        if key not in recorded:
            raise ConfigError(f"{self.stack_file} has no {key}; run `wayline up` or set {env_name}")
        return recorded[key]


__all__ = [
    "DEFAULT_RETRY_JITTER",
    "DEFAULT_RETRY_SCHEDULE_S",
    "ApiSettings",
    "AuditSettings",
    "ClusterSettings",
    "CONFIG_FILE_ENV",
    "ConsoleSettings",
    "DeliverySettings",
    "RegistrySettings",
    "RulesSettings",
    "EnvelopeSettings",
    "KafkaSettings",
    "MessagingSettings",
    "PostgresSettings",
    "ReconSettings",
    "Settings",
    "SparkSettings",
    "StackSettings",
]
