"""Every acceptance figure of the site's policy in one Markdown table (`simulate report`).

The validation day for each seed (each criterion, and site GPU utilisation against EASY's);
the SWF trace `lublin_256.swf` at its own offered load and stretched to 0.7 and 0.85 (mean
bounded slowdown at most 0.8x EASY's, no wait longer than 1.5x EASY's longest); the Alibaba
GPU trace contended (`--compress 100 --node-share 0.05`: mean bounded slowdown at most 0.8x
EASY's, over every pod and for each type). Each simulation is one unit of work, run in
`jobs` processes side by side; the table says how long each took. No Django.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from simulation.simulator.criteria import format_value, validation_day_report
from simulation.simulator.engine import simulate
from simulation.simulator.metrics import summary
from simulation.simulator.traces import (
    SWF_CORES,
    alibaba_site,
    at_load,
    offered_load,
    read_alibaba,
    read_swf,
    swf_site,
)

SWF = "lublin_256.swf"
PODS, NODES = "openb_pod_list_default.csv", "openb_node_list_gpu_node.csv"
LOADS = (None, 0.7, 0.85)  # None: the trace's own
ALIBABA = {"compress": 100.0, "node_share": 0.05}
POLICIES = ("switchyard", "easy")
BSLD_RATIO, WAIT_RATIO = 0.8, 1.5
START = "<!-- simulation-report: start (`make simulation-report` writes what follows) -->"
END = "<!-- simulation-report: end -->"


class ReportError(ValueError):
    """Bad input to the report: the field, what was expected, what was given."""


def parse_seeds(text: str) -> list[int]:
    """`1-5` or `1,2,3` (or one seed) as a list of seeds."""
    found = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", text)
    if found:
        lo, hi = int(found[1]), int(found[2])
        if lo <= hi:
            return list(range(lo, hi + 1))
    elif re.fullmatch(r"\s*\d+\s*(,\s*\d+\s*)*", text):
        return [int(s) for s in text.split(",")]
    raise ReportError(f"seeds: expected a range such as 1-5 or a list such as 1,2,3, got {text!r}")


def units(seeds: Sequence[int], traces: Path) -> list[tuple]:
    """The simulations to run, the longest first (so two processes finish together)."""
    work: list[tuple] = []
    if (traces / PODS).is_file() and (traces / NODES).is_file():
        work += [("alibaba", str(traces / PODS), str(traces / NODES), p) for p in POLICIES]
    if (traces / SWF).is_file():
        work += [("swf", str(traces / SWF), load, p) for load in LOADS for p in POLICIES]
    return work + [("day", seed) for seed in seeds]


def run_unit(unit: tuple) -> dict:
    """One simulation of the report, and how long it took (seconds)."""
    started = time.perf_counter()
    if unit[0] == "day":
        report = validation_day_report(unit[1])
        result: dict = {
            "criteria": [
                {k: v for k, v in r.items() if k not in ("how", "why")} for r in report["criteria"]
            ],
            "gpu": {
                p: 100 * (s["utilisation"]["site"]["gpu"] or 0.0)
                for p, s in report["summaries"].items()
            },
        }
    elif unit[0] == "swf":
        _, path, load, policy = unit
        jobs = read_swf(path)
        native = offered_load(jobs, SWF_CORES)
        if load is not None:
            jobs = at_load(jobs, SWF_CORES, load)
        s = summary(simulate(jobs, swf_site(), policy), swf_site().pools)
        result = {
            "load": offered_load(jobs, SWF_CORES),
            "native": native,
            "bsld": s["mean_bsld"],
            "max_wait": max((t["max_wait_s"] for t in s["types"].values()), default=0.0),
            "never": s["never"],
        }
    else:
        _, pods, nodes, policy = unit
        jobs, _ = read_alibaba(pods, compress=ALIBABA["compress"])
        site = alibaba_site(nodes, share=ALIBABA["node_share"])
        s = summary(simulate(jobs, site, policy), site.pools)
        result = {
            "bsld": s["mean_bsld"],
            "types": {k: t["mean_bsld"] for k, t in s["types"].items()},
            "never": s["never"],
        }
    return {"unit": unit, "seconds": time.perf_counter() - started, **result}


def run_report(
    seeds: Sequence[int],
    traces: Path,
    *,
    jobs: int = 2,
    say: Callable[[str], None] = lambda line: None,
) -> dict:
    """Run every unit (in `jobs` processes; 1: here) and gather them for `format_report`."""
    work = units(seeds, traces)
    started, done = time.perf_counter(), []
    say(f"{len(work)} simulations in {jobs} process(es); traces from {traces}")
    if jobs <= 1:
        for unit in work:
            done.append(run_unit(unit))
            say(f"[{len(done)}/{len(work)}] {_label(unit)}: " + _took(done))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(run_unit, unit) for unit in work]
            for future in as_completed(futures):
                done.append(future.result())
                say(f"[{len(done)}/{len(work)}] {_label(future.result()['unit'])}: " + _took(done))
    missing = [name for name in (SWF, PODS, NODES) if not (traces / name).is_file()]
    return {
        "seeds": list(seeds),
        "traces": str(traces),
        "traces_shown": os.path.relpath(traces),  # from where it ran: ../shared/traces
        "missing": missing,
        "units": done,
        "seconds": time.perf_counter() - started,
        "jobs": jobs,
        "cores": os.cpu_count(),
    }


def _took(done: list[dict]) -> str:
    return f"{done[-1]['seconds']:.1f} s"


def _label(unit: tuple) -> str:
    if unit[0] == "day":
        return f"validation day, seed {unit[1]}"
    if unit[0] == "swf":
        return f"SWF {SWF}, load {'its own' if unit[2] is None else unit[2]}, {unit[3]}"
    return f"Alibaba contended, {unit[3]}"


def _met(ok: bool) -> str:
    return "pass" if ok else "**FAIL**"


def _ratio_row(run: str, figure: str, target: float, mine: float, easy: float, secs: str) -> tuple:
    """Switchyard against EASY: at most `target` times EASY's value. Bounded slowdown's floor
    is 1: where both are at it, no policy can do better, and the row says so."""
    if easy <= 1.0 + 1e-9 and mine <= 1.0 + 1e-9 and figure.startswith("mean bounded"):
        met = "pass: both at the floor (1.00)"
    else:
        met = _met(easy > 0 and mine <= target * easy)
    ratio = f"{mine / easy:.2f}" if easy > 0 else "-"
    return (run, figure, f"<= {target:g}x EASY", _num(mine), _num(easy), ratio, met, secs)


def _num(value: float) -> str:
    return f"{value:,.2f}" if value < 10 else f"{value:,.1f}"


def _wait(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else format_value(seconds, "s")


def format_report(report: dict) -> str:
    """The whole report as one Markdown table, under a line saying how it was made."""
    by = {tuple(u["unit"]): u for u in report["units"]}
    rows: list[tuple] = []
    for seed in report["seeds"]:
        u = by[("day", seed)]
        secs = f"{u['seconds']:.1f} s (3 policies)"
        run = f"validation day, seed {seed}"
        for c in u["criteria"]:
            v, unit = c["values"], c["unit"]
            target = c["target"]
            if "FIFO" in target:
                target += f"; FIFO: {format_value(v['fifo'], unit)}"
            rows.append(
                (
                    run,
                    c["criterion"],
                    target,
                    format_value(v["switchyard"], unit),
                    format_value(v["easy"], unit),
                    "-",
                    _met(c["passed"]),
                    secs,
                )
            )
        mine, easy = u["gpu"]["switchyard"], u["gpu"]["easy"]
        rows.append(
            (
                run,
                "site GPU utilisation against EASY",
                ">= EASY's",
                f"{mine:.1f} %",
                f"{easy:.1f} %",
                f"{mine / easy:.2f}" if easy else "-",
                _met(mine >= easy),
                secs,
            )
        )
    for load in LOADS:
        mine, easy = (
            by.get(("swf", _path(report, SWF), load, "switchyard")),
            by.get(("swf", _path(report, SWF), load, "easy")),
        )
        if not (mine and easy):
            continue
        shown = f"{mine['native']:.2f} (its own)" if load is None else f"{mine['load']:.2f}"
        run = f"SWF {SWF}, offered load {shown}{_never(mine, easy)}"
        secs = f"{mine['seconds']:.1f} / {easy['seconds']:.1f} s"
        rows.append(
            _ratio_row(run, "mean bounded slowdown", BSLD_RATIO, mine["bsld"], easy["bsld"], secs)
        )
        row = _ratio_row(run, "longest wait", WAIT_RATIO, mine["max_wait"], easy["max_wait"], secs)
        rows.append(row[:3] + (_wait(mine["max_wait"]), _wait(easy["max_wait"])) + row[5:])
    mine = by.get(("alibaba", _path(report, PODS), _path(report, NODES), "switchyard"))
    easy = by.get(("alibaba", _path(report, PODS), _path(report, NODES), "easy"))
    if mine and easy:
        run = f"Alibaba openb, --compress 100 --node-share 0.05{_never(mine, easy)}"
        secs = f"{mine['seconds']:.1f} / {easy['seconds']:.1f} s"
        rows.append(
            _ratio_row(
                run,
                "mean bounded slowdown, every pod",
                BSLD_RATIO,
                mine["bsld"],
                easy["bsld"],
                secs,
            )
        )
        for kind in sorted(set(mine["types"]) | set(easy["types"])):
            rows.append(
                _ratio_row(
                    run,
                    f"mean bounded slowdown, {kind}",
                    BSLD_RATIO,
                    mine["types"].get(kind, 0.0),
                    easy["types"].get(kind, 0.0),
                    secs,
                )
            )
    passed = sum(1 for r in rows if r[6].startswith("pass"))
    traces = report.get("traces_shown", report["traces"])
    lines = [
        f"{passed} of {len(rows)} figures pass. Seeds {_seeds(report['seeds'])}; traces from "
        f"`{traces}`; {report['seconds']:.0f} s in all, {report['jobs']} processes on "
        f"{report['cores']} cores. Run time: the validation day's three policies together, "
        "else Switchyard's / EASY's run.",
        "",
        "| run | figure | target | Switchyard | EASY | ratio | met | run time |",
        "|---|---|---|---|---|---|---|---|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]
    if report["missing"]:
        lines += ["", f"Not run: {', '.join(report['missing'])} not found in `{traces}`."]
    return "\n".join(lines)


def _never(mine: dict, easy: dict) -> str:
    """Jobs that never started count in no mean: the run says how many there were."""
    if not (mine["never"] or easy["never"]):
        return ""
    return f" (never started: Switchyard {mine['never']}, EASY {easy['never']})"


def _path(report: dict, name: str) -> str:
    return str(Path(report["traces"]) / name)


def _seeds(seeds: Sequence[int]) -> str:
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(str(s) for s in seeds)


def split_at_markers(path: Path) -> tuple[str, str]:
    """What comes before the report's start marker in `path` and after its end marker."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ReportError(
            f"write: expected a file to write into, got {path} ({exc.strerror})"
        ) from None
    if START not in text or END not in text or text.index(START) > text.index(END):
        raise ReportError(f"write: expected the lines {START} and {END} in {path}, got none")
    head, rest = text.split(START, 1)
    return head, rest.split(END, 1)[1]


def write_between_markers(path: Path, table: str) -> None:
    """Put `table` between the report's markers in `path`, leaving the rest as it is."""
    head, tail = split_at_markers(path)
    path.write_text(f"{head}{START}\n{table}\n{END}{tail}")
