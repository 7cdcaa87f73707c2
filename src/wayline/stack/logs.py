"""Log files for the JVM processes and the jobs: the terminal stays free for Wayline's own output."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


def write_log4j2_config(config: Path, log_file: Path, root_level: str, levels: Mapping[str, str] | None = None) -> Path:
    """A log4j2 properties file sending everything at `root_level` and above to `log_file`."""
    lines = [
        "status = warn",
        "appender.file.type = File",
        "appender.file.name = file",
        f"appender.file.fileName = {log_file}",
        "appender.file.layout.type = PatternLayout",
        "appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n",
        f"rootLogger.level = {root_level}",
        "rootLogger.appenderRef.file.ref = file",
    ]
    for number, (logger, level) in enumerate(sorted((levels or {}).items())):
        lines += [f"logger.l{number}.name = {logger}", f"logger.l{number}.level = {level}"]
    config.parent.mkdir(parents=True, exist_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("\n".join(lines) + "\n")
    return config


@contextmanager
def job_log(log_file: Path) -> Iterator[Path]:
    """Until the block ends, standard error goes to ``log_file``, at the file descriptor:
    this process's, native libraries' included (librdkafka's ``%6|…`` lines), and that of
    every process started meanwhile, which keep it (Spark's JVM, and through it the Python
    workers); and so do Wayline's own log records from INFO up. A live view owns the terminal."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with log_file.open("ab") as log:
        os.dup2(log.fileno(), 2)
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    wayline = logging.getLogger("wayline")
    level = wayline.level
    wayline.addHandler(handler)
    wayline.setLevel(logging.INFO)
    try:
        yield log_file
    finally:
        wayline.removeHandler(handler)
        wayline.setLevel(level)
        handler.close()
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


__all__ = ["job_log", "write_log4j2_config"]
