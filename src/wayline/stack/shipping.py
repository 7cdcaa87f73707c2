"""What a job on a non-local Spark master must give its executors, and what it must refuse.

In local mode the executors are threads of the driver's JVM and see its files; on a
cluster they are other processes, usually on other machines. They get:

- the connector jars: ``spark.jars`` (set for every master) names files on the driver,
  which Spark's file server hands to each executor;
- the ``wayline`` package: a zip of the installed package in ``spark.submit.pyFiles``
  (``spark.ship_package``); its dependencies must already be in the executors' Python,
  named by ``spark.pyspark.python`` (default: the driver's interpreter, which is right
  when every node has the same environment, as the local cluster and a container image do);
- broker and database addresses resolved on the driver from the settings, never a
  local stack file (see :func:`wayline.pipelines.sending.task_settings`);
- checkpoints on storage every node sees: refused here when they are not.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from urllib.parse import urlparse

from wayline.core.errors import ConfigError
from wayline.core.settings import Settings

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def is_local_master(master: str) -> bool:
    """``local``, ``local[N]`` and ``local-cluster[…]``: every executor is on this machine."""
    return master.startswith("local")


def master_on_loopback(master: str) -> bool:
    """A cluster whose master listens on the loopback serves only this machine (the local
    standalone cluster): the driver then keeps its ports on 127.0.0.1 too."""
    return urlparse(master).hostname in _LOOPBACK


def check_checkpoints(settings: Settings) -> None:
    """Refuse a checkpoint path only the driver can see on a master whose executors may be elsewhere.

    A plain path lands on Hadoop's default filesystem: the local disk, unless
    ``spark.hadoop.fs.defaultFS`` in ``spark.extra_conf`` names another (``hdfs://…``,
    ``s3a://bucket``, ``abfss://…``); then the same path is on that store. A local path is
    accepted when ``spark.shared_checkpoints`` says every node mounts it at the same place.
    """
    master = settings.spark.master
    if is_local_master(master) or master_on_loopback(master) or settings.spark.shared_checkpoints:
        return
    default_fs = settings.spark.extra_conf.get("spark.hadoop.fs.defaultFS", "file:///")
    if urlparse(default_fs).scheme not in ("", "file"):
        return
    raise ConfigError(
        f"checkpoints at {settings.checkpoint_root.resolve()} are on the driver's local disk, which executors "
        f"of {master} do not see; put state_dir on storage every node mounts at the same path and set "
        "WAYLINE_SPARK__SHARED_CHECKPOINTS=true, or name a shared filesystem in spark.extra_conf "
        "(\"spark.hadoop.fs.defaultFS\" = \"s3a://bucket\", \"hdfs://namenode:8020\", \"abfss://…\")"
    )


def package_zip(settings: Settings) -> Path:
    """The installed ``wayline`` package as a zip for ``spark.submit.pyFiles``, rebuilt on every start
    so executors never run older code than the driver."""
    import wayline

    package = Path(wayline.__file__).resolve().parent
    target = (settings.state_dir / "dist" / "wayline.zip").resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, Path("wayline") / path.relative_to(package))
    return target


def cluster_conf(settings: Settings) -> dict[str, str]:
    """The settings a session on a non-local master adds to :func:`wayline.stack.spark.spark_conf`."""
    check_checkpoints(settings)
    conf = {"spark.pyspark.python": sys.executable}
    if settings.spark.ship_package:
        conf["spark.submit.pyFiles"] = str(package_zip(settings))
    return conf


__all__ = ["check_checkpoints", "cluster_conf", "is_local_master", "master_on_loopback", "package_zip"]
