"""Benchmark: how long the admin API's process takes to import and build its app, before
and after a change, and which heavy libraries it loads on the way.

Each run is a fresh interpreter that imports the admin app and builds it over a registry
engine (no connection is opened) — alone, and after importing the command line as
`wayline serve admin` does — then reports the time that took and its ``sys.modules``. Compared in the
same run: the same steps on the source tree of ``--before`` (a git revision, exported to a
temporary folder), and a bare interpreter start as the baseline.
Run: .venv/bin/python bench/admin_start.py [--before REV] [--runs 9]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from toolkit import cli
from toolkit.results import record_results

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("pyspark", "sqlalchemy", "aiohttp", "confluent_kafka", "pandas", "pyarrow", "sqlglot")
# What `wayline serve admin` does before uvicorn starts, in either tree's API: older trees
# have no composition module and build the engine from the settings object.
PROBE = """
import sys, time, json
started = time.perf_counter()
{command}from wayline.api.app import create_app
from wayline.core.settings import Settings
from wayline.registry.db import Database, make_engine
settings = Settings()
try:
    engine = make_engine(settings.postgres_dsn())
except AttributeError:
    engine = make_engine(settings)
except Exception:
    engine = make_engine("postgresql://wayline@127.0.0.1:9/wayline")
create_app(settings, Database(engine))
took = time.perf_counter() - started
print(json.dumps({"seconds": took, "loaded": sorted({m.split(".")[0] for m in sys.modules})}))
"""


# The app alone (as a server embedding it imports it), and as `wayline serve admin` starts it.
PROBES = {"app": PROBE.replace("{command}", ""), "command": PROBE.replace("{command}", "import wayline.cli.main\n")}


def run(src: Path | None, code: str) -> tuple[float, list[str]]:
    env = dict(os.environ, WAYLINE_POSTGRES__DSN="postgresql://wayline@127.0.0.1:9/wayline")
    if src is not None:
        env["PYTHONPATH"] = str(src)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - started
    if not done.stdout.strip():
        return wall, []
    report = json.loads(done.stdout)
    return report["seconds"], [name for name in HEAVY if name in report["loaded"]]


def export(revision: str, into: Path) -> Path:
    archive = into / "tree.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), revision, "src"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def main() -> None:
    parser = cli.parser(__doc__, runs=9)
    parser.add_argument("--before", default="ab11c42", help="the revision to compare with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        trees = {f"before ({args.before})": export(args.before, Path(folder)), "after (this tree)": REPO / "src"}
        variants = {"baseline: bare interpreter start (wall)": (None, "pass")}
        for tree, src in trees.items():
            for probe, code in PROBES.items():
                variants[f"{tree}, {probe}"] = (src, code)
        walls: dict[str, list[float]] = {name: [] for name in variants}
        loaded: dict[str, list[str]] = {}
        for _ in range(args.runs):
            # Interleaved, so a busy spell on the shared machine hits every variant alike.
            for name, (src, code) in variants.items():
                seconds, heavy = run(src, code)
                walls[name].append(seconds)
                loaded[name] = heavy
    record_results("admin_start", {"runs": args.runs,
                                   "median_s": {name: statistics.median(times) for name, times in walls.items()},
                                   "all_s": walls, "heavy_loaded": loaded}, args.out)
    for name, times in walls.items():
        print(f"{name:42} median {statistics.median(times):6.3f} s  "
              f"(min {min(times):.3f}, max {max(times):.3f})  heavy: {', '.join(loaded[name]) or '-'}")


if __name__ == "__main__":
    main()
