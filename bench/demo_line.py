"""`make demo` against its line (issue 25): run it from a fresh state in a real terminal, as a newcomer does, and read its screen.

From the checkout, with nothing else running:

    .venv/bin/python bench/demo_line.py --runs 3

Each run removes the state folder (`.wayline`), starts `make demo` in a 200 × 50 tmux pane
(what `../shared/tools/demo-look` does), and every 15 s reads the screen's "Last 60 s at the
receiver" table (streaming and batch p50 and p99), the 1-minute load average, and the CPU
each kind of process used since the last look (from ``/proc``: the Spark JVMs, the broker,
PostgreSQL, the demo's own process, the sender, intake and recon processes, the JVMs'
Python workers). After ``--seconds`` it presses Ctrl-C, waits for the demo to stop, and
lets the machine settle before the next run. The line: at 120 s, streaming p99 < 1 s,
batch p99 < 2 s, load average < 4.

``--code DIR`` runs another checkout's Wayline (its ``src`` put first on ``PYTHONPATH``),
for a back-to-back pair against this one: ``--code /work/wt-before`` after
``git worktree add /work/wt-before <commit>`` and a link to this checkout's ``jars``.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from toolkit.cli import parser
from toolkit.processes import cpu_of, processes
from toolkit.results import markdown_table, record_results

CHECKOUT = Path(__file__).resolve().parents[1]
LOOK_S = 15
LINE_AT_S = 120
SETTLE_S = 45
STOP_WAIT_S = 120
_ROW = re.compile(r"(streaming|batch) mode\s*│\s*[\d,]+\s*│\s*([\d,]+|–)( ms)?\s*│\s*([\d,]+|–)")
# The runtime processes start as `python -m wayline.cli.runtime senders|intake`, or as
# `wayline run senders|intake` by hand: a word of the command names them either way.
_KINDS = (("broker", b"kafka.Kafka"), ("workers", b"worker_daemon"), ("sender", b"\0senders"),
          ("intake", b"\0intake"), ("recon", b"run\0recon"), ("demo", b"wayline\0demo"))


def kind(command: bytes) -> str | None:
    """Which part of the demo a process is, by its command line (NUL-separated)."""
    program = command.split(b"\0", 1)[0]
    if program.endswith(b"java"):
        return "broker" if b"kafka.Kafka" in command else "jvm"
    if b"postgres" in program:
        return "postgres"
    return next((name for name, mark in _KINDS if mark in command), None)


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds used so far by every process of the demo alive now, per kind."""
    used: dict[str, float] = {}
    for pid, process in processes().items():
        found = kind(process.command)
        seconds = cpu_of(pid) if found else None
        if found and seconds is not None:
            used[found] = used.get(found, 0.0) + seconds
    return used


def last_minute(screen: str) -> dict[str, float | None]:
    """The screen's last-60-s p50 and p99 (seconds) per mode: ``streaming_p99`` and so on."""
    figures: dict[str, float | None] = {}
    for mode, p50, _, p99 in _ROW.findall(screen):
        for name, text in (("p50", p50), ("p99", p99)):
            figures.setdefault(f"{mode}_{name}", None if text == "–" else int(text.replace(",", "")) / 1000)
    return figures


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False).stdout


def demo_running() -> bool:
    return subprocess.run(["pgrep", "-f", "wayline demo"], capture_output=True, check=False).returncode == 0


def run_once(number: int, seconds: float, code: Path | None) -> list[dict[str, float | None]]:
    """One demo from a fresh state; what its screen and ``/proc`` said at every look."""
    shutil.rmtree(CHECKOUT / ".wayline", ignore_errors=True)
    session = f"demo-line-{os.getpid()}-{number}"
    # In the command, not the environment: a tmux server already running would not pass it on.
    command = f"PYTHONPATH={code.resolve() / 'src'} make demo" if code else "make demo"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "200", "-y", "50", command],
                   cwd=CHECKOUT, check=True)
    looks: list[dict[str, float | None]] = []
    began, before = time.monotonic(), cpu_by_kind()
    try:
        for at in range(LOOK_S, int(seconds) + 1, LOOK_S):
            time.sleep(max(0.0, began + at - time.monotonic()))
            now = cpu_by_kind()
            cores = {f"cpu_{name}": (used - before.get(name, 0.0)) / LOOK_S for name, used in now.items()}
            before = now
            looks.append({"at_s": at, "load": os.getloadavg()[0], **last_minute(tmux("capture-pane", "-t", session, "-p")),
                          **cores})
    finally:
        tmux("send-keys", "-t", session, "C-c")
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline and session in tmux("list-sessions", "-F", "#{session_name}"):
            time.sleep(1)
        if session in tmux("list-sessions", "-F", "#{session_name}"):
            print(f"run {number}: the demo did not stop within {STOP_WAIT_S} s of Ctrl-C; its session is killed")
            tmux("kill-session", "-t", session)
    return looks


def show(figure: float | None) -> str:
    return "–" if figure is None else f"{figure:.2f}"


def main() -> None:
    made = parser(__doc__, runs=3)
    made.add_argument("--seconds", type=float, default=180, help="how long each demo runs (180)")
    made.add_argument("--code", type=Path, help="a checkout whose Wayline runs instead of this one's")
    args = made.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is missing: apt-get install -y tmux")
    if demo_running():
        raise SystemExit("a demo runs already: stop it first (two on one machine measure each other)")
    runs = []
    for number in range(args.runs):
        if number:
            time.sleep(SETTLE_S)  # the last run's load average decays
        runs.append(run_once(number, args.seconds, args.code))
    header = ["run", "at", "streaming p50 / p99 s", "batch p50 / p99 s", "load", "CPU cores by process"]
    rows = []
    for number, looks in enumerate(runs):
        for look in looks:
            if look["at_s"] % 30 == 0:
                cores = sorted(((k.removeprefix("cpu_"), v) for k, v in look.items() if k.startswith("cpu_") and v),
                               key=lambda kv: -kv[1])
                rows.append([str(number), f"{look['at_s']:.0f} s",
                             f"{show(look.get('streaming_p50'))} / {show(look.get('streaming_p99'))}",
                             f"{show(look.get('batch_p50'))} / {show(look.get('batch_p99'))}", f"{look['load']:.1f}",
                             ", ".join(f"{k} {v:.2f}" for k, v in cores)])
    print(markdown_table(header, rows))
    at_line = [next((look for look in looks if look["at_s"] == LINE_AT_S), {}) for looks in runs]
    for figure in ("streaming_p99", "batch_p99", "load"):
        values = [look[figure] for look in at_line if look.get(figure) is not None]
        print(f"at {LINE_AT_S} s, {figure}: median {show(statistics.median(values)) if values else '–'} "
              f"of {', '.join(map(show, values))}")
    met = [look.get("streaming_p99") is not None and look["streaming_p99"] < 1 and look.get("batch_p99") is not None
           and look["batch_p99"] < 2 and look["load"] < 4 for look in at_line]
    print(f"the line met at {LINE_AT_S} s in {sum(met)} of {len(met)} runs")
    print(record_results("demo_line", {"args": vars(args), "runs": runs}, args.out))


if __name__ == "__main__":
    main()
