"""The SparkSession every Wayline job and test uses.

JVM settings (jars, memory) only take effect when the JVM starts, and a later
``getOrCreate()`` silently reuses a running JVM; so this is the single place that
builds a session, and it refuses to hand out one that was started without Wayline's jars.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from wayline.core.errors import ConfigError, MissingJarsError
from wayline.core.settings import Settings
from wayline.stack.logs import write_log4j2_config
from wayline.stack.shipping import cluster_conf, is_local_master, master_on_loopback

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

def connector_jars(jars_dir: Path) -> list[Path]:
    jars = sorted(jars_dir.glob("*.jar"))
    for wanted, what in (("spark-sql-kafka", "Spark Kafka connector"), ("wayline-spark", "wayline-spark.jar")):
        if not any(jar.name.startswith(wanted) for jar in jars):
            raise MissingJarsError(
                f"no {what} in {jars_dir.resolve()}: run `make jars` in the Wayline checkout "
                "(or point WAYLINE_SPARK__JARS_DIR at the folder it filled)"
            )
    return jars


KAFKA_CONSUMERS_CACHED = 1024
WORKER_DAEMON = "wayline.stack.worker_daemon"


def spark_conf(settings: Settings) -> dict[str, str]:
    """Every setting the session starts with; the cluster's own defaults fill the rest."""
    jars = ",".join(str(jar.resolve()) for jar in connector_jars(settings.spark.jars_dir))
    conf = {
        "spark.jars": jars,
        "spark.app.name": settings.spark.app_name,
        "spark.driver.memory": settings.spark.driver_memory,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(settings.spark.shuffle_partitions),
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.checkpointLocation": str(settings.checkpoint_root.resolve()),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Spark would replace ${env:…}, ${system:…} and ${spark.…} in any SQL text it parses,
        # literals included: rule SQL could read the job's environment and settings.
        "spark.sql.variable.substitute": "false",
        # Local runs would otherwise leave a Derby metastore and a warehouse in the cwd.
        "spark.sql.warehouse.dir": str((settings.state_dir / "warehouse").resolve()),
        # A consumer per source partition an executor reads, kept between micro-batches: the
        # default 64 would close and reopen consumers in every micro-batch over the brief's
        # 500 topics (a micro-batch reads each partition that has new data).
        "spark.kafka.consumer.cache.capacity": str(KAFKA_CONSUMERS_CACHED),
        # The Python workers fork from a daemon that has imported Wayline's worker-side
        # modules already (wayline.stack.worker_daemon).
        "spark.python.daemon.module": WORKER_DAEMON,
    }
    if not is_local_master(settings.spark.master):
        conf.update(cluster_conf(settings))
    if is_local_master(settings.spark.master) or master_on_loopback(settings.spark.master):
        # A local run serves nobody else: keep the driver's ports on the loopback interface.
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf["spark.driver.host"] = "127.0.0.1"
    conf.update(settings.spark.extra_conf)
    return conf


def spark_session(settings: Settings):  # -> pyspark.sql.SparkSession (import is slow; kept lazy)
    """Start (or return the already started) SparkSession configured for Wayline."""
    # Workers must run this interpreter, or they miss the packages installed beside it.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    conf = spark_conf(settings)
    # Spark's own log goes to a file, so the terminal is left to Wayline's live views.
    log_dir = (settings.state_dir / "logs").resolve()
    log_config = write_log4j2_config(log_dir / "log4j2-spark.properties", log_dir / "spark.log", "WARN")
    conf.setdefault("spark.driver.extraJavaOptions",
                    f"-Dlog4j2.configurationFile={log_config} {settings.spark.java_options}".strip())
    running = SparkSession.getActiveSession()
    if running is not None:
        started_with = running.sparkContext.getConf().get("spark.jars", "")
        if started_with != conf["spark.jars"]:
            raise ConfigError(
                "a SparkSession is already running without Wayline's jars; "
                "create Wayline's session before any other in this process"
            )
        return running
    builder = SparkSession.builder.master(settings.spark.master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


__all__ = ["ROCKSDB_PROVIDER", "WORKER_DAEMON", "connector_jars", "spark_conf", "spark_session"]
