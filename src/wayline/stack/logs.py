"""Log files for the JVM processes: the terminal stays free for Wayline's own output."""

from __future__ import annotations

from collections.abc import Mapping
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


__all__ = ["write_log4j2_config"]
