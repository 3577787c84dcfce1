"""Pipelines misconfigured on purpose: the hand setting, "auto", the grid's best, tune() and tf.data AUTOTUNE.

Six pipelines, each written with a wrong setting a user could have guessed (all work is fixed
and calibrated once at start on an idle core, so contention shows up as lost throughput):

1. ``slow map``: a pure-Python map of ~2 ms per datapoint in 1 process (too few workers);
2. ``cheap map, slow consumer``: a ~0.1 ms map in 8 processes under a consumer that spends ~5 ms
   of Python CPU work per datapoint (too many workers: they can only take the consumer's CPU);
3. ``I/O-like``: a stage that sleeps ~5 ms per datapoint (the GIL released) plus ~0.05 ms of
   CPU, in 2 threads, under a consumer of ~1 ms per datapoint (it wants more threads than cores);
4. ``small dataset, cache``: a deterministic ~2 ms map over 200 datapoints, epoch after epoch, in
   1 process ("auto" cannot cache; tune() can: its configuration is a column of its own);
5. ``trainer needs the CPU``: a ~2 ms map in 4 processes under a trainer step of ~8 ms that
   keeps ~1.5 cores busy with numpy matmuls in two threads (the GIL released);
6. ``nested chain``: ``MultiProcessRunnerZMQ(MultiProcessMapData(MultiProcessMapData(src, n1, f),
   n2, g), 1)`` with f ~2 ms and g ~1 ms, by hand n1=1, n2=4.

Each pipeline runs with (a) its hand setting, (b) "auto" (``num_proc``/``num_thread="auto"``
and ``buffer_size="auto"`` on every parallel stage), (c) the best setting of a grid search over
the worker counts (and processes vs threads where it matters), (d) tf.data AUTOTUNE on the same
work (``Dataset.map(tf.numpy_function(same Python function), num_parallel_calls=AUTOTUNE)``
and ``prefetch(AUTOTUNE)``: how tf.data runs Python code; its threads share the GIL), and
(e) the configuration ``tune()`` prints for the hand setting (given the consumer's rate where
the consumer works, and a CPU budget of 1 for pipeline 5, as a user would; for the nested
chain, tune() gets the chain inside the runner and its result is put back in the runner).

The grid (the hand setting among its points) is searched first, one run per point; then hand,
auto, the grid's best, tune() and tf.data take turns for ``--repeats`` rounds, in an order that
rotates from round to round (a setting that is two of these is run once per round).
Every measurement runs in a fresh subprocess (its workers closed before the next one starts),
warms up (``--warmup`` s for pinned settings, ``--auto-warmup`` s for "auto" and tf.data, so the
controllers settle), then counts the datapoints the consumer takes in ``--seconds`` s. For each
it records the consumer's step (wall time per datapoint) and its own work per step, the CPU of
the process tree (without workers retired during the window); for "auto" the worker-count
history of every auto stage (when it last changed: "settled"), and the controller's own CPU time
(``autoscale_cost()``). The table shows medians, the spread (min-max) and the ratios auto / grid
best (target >= 0.95), auto / hand (>= 1) and auto / tf.data (> 1), and the step time with hand
and with auto; beside the ratios to the grid's best, the median of each round's own ratio (the
runs of one round are minutes apart: the host's speed, which can move by a third over a run,
moves less between them). The pipelines and what runs in each subprocess are in ``autotune_pipelines.py``.

    python benchmarks/bench_autotune.py                       # about 35 minutes on 2 cores
    python benchmarks/bench_autotune.py --pipelines "slow map" "nested chain" --repeats 5
    python benchmarks/bench_autotune.py --quick               # a smoke run of every path

Writes ``benchmarks/results/autotune.json`` (a run of some pipelines: ``autotune-<date>-<time>.json``
there; ``--quick``: a file in the temp directory).
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from autotune_pipelines import PIPELINES, RESULT_PREFIX, label, run_child  # noqa: E402
from autotune_work import spin  # noqa: E402

ROLES = ("hand", "auto", "grid best", "tune()", "tf.data AUTOTUNE")
#: ``--keep-workers``: "auto" that never maps in the consumer's thread (what the default's move to
#: 0 workers gains).
KEPT_ROLE = "auto, min_workers=1"

# ----------------------------------------------------------------------------------- the driver

def calibrate():
    """spin() iterations and 256x256 float32 matmuls per ms, on this idle thread (best of 5)."""
    import numpy as np

    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        spin(100000, 1)
        best = min(best, time.perf_counter() - start)
    matrix = np.random.default_rng(0).random((256, 256), dtype=np.float32)
    best_mm = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(50):
            matrix @ matrix
        best_mm = min(best_mm, (time.perf_counter() - start) / 50)
    return {"spin_per_ms": 100000 / (best * 1e3), "matmul_per_ms": 1 / (best_mm * 1e3)}


def check_cost_ns():
    """ns per datapoint that an auto stage spends on the iteration path outside its decisions:
    the time check and the timing of the wait (three clock reads), as the map scheduler does."""
    class Due:
        due = float("inf")

    scaling, waited, count = Due(), 0.0, 200000
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(count):
            if time.monotonic() >= scaling.due:
                pass
            started = time.monotonic()
            waited += time.monotonic() - started
        with_checks = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(count):
            pass
        best = min(best, (with_checks - (time.perf_counter() - start)) / count)
    return best * 1e9


def session_processes(session):
    """Pids of the processes still in ``session`` (a child's session: its workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/{}/stat".format(entry)) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session and fields[0] != "Z":
                found.append(int(entry))
    return found


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def measure(pipeline, config, args, calibration, warmup=None):
    """One run in a fresh subprocess (its own session, killed whole on a timeout)."""
    auto_like = config["kind"] in ("auto", "tf.data")    # (with "keep_workers" too)
    spec = {"pipeline": pipeline, "config": config, "calibration": calibration, "seconds": args.seconds,
            "phase_seconds": args.phase_seconds,
            "warmup": warmup if warmup is not None else (args.auto_warmup if auto_like else args.warmup),
            "tune_seconds": args.tune_seconds, "scratch": tempfile.mkdtemp(prefix="bench-autotune-")}
    window = window_seconds(pipeline, args)
    spec_path = os.path.join(spec["scratch"], "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, HERE]), TF_CPP_MIN_LOG_LEVEL="3")
    timeout = spec["warmup"] + window + 4 * args.tune_seconds + 120
    process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", spec_path],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except BaseException as failure:           # a timeout, or Ctrl-C: the child's session goes with it
        process.kill()
        process.communicate()
        kill_all(session_processes(process.pid))
        if isinstance(failure, subprocess.TimeoutExpired):
            return {"error": "timed out after {:.0f} s".format(timeout)}
        raise
    finally:
        shutil.rmtree(spec["scratch"], ignore_errors=True)
    left = session_processes(process.pid)
    if left:                                   # give them a second to finish exiting
        time.sleep(1.0)
        left = session_processes(process.pid)
    if left:                                   # the child's workers outlived it: say so, then stop them
        kill_all(left)
        return {"error": "processes {} were left running after the measurement".format(left)}
    for line in out.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return {"error": "exit {}: {}".format(process.returncode, (err.strip().splitlines() or ["no output"])[-1])}


def window_seconds(pipeline, args):
    """Seconds counted in a run: ``--seconds``, or for a pipeline whose cost changes, every phase."""
    phases = PIPELINES[pipeline].get("phases")
    return args.seconds if not phases else args.phase_seconds * len(phases["names"])


def phase_names(pipeline):
    phases = PIPELINES[pipeline].get("phases")
    return phases["names"] if phases else []


def key(config):
    return json.dumps({k: v for k, v in config.items() if k != "label"}, sort_keys=True)


def spread(values, fmt="{:.0f}"):
    return (fmt + "-" + fmt).format(min(values), max(values)) if values else ""


def ratio(a, b):
    return a / b if a and b else None


def fmt_ratio(value):
    return "{:.2f}".format(value) if value is not None else "-"


def paired_ratio(role, other):
    """The median over rounds of ``role``'s rate / ``other``'s in the same round (None without a
    round where both ran; a setting that is both roles has ratio 1)."""
    if not role or not other:
        return None
    theirs = {r["round"]: r["datapoints_per_s"] for r in other["runs"]}
    ratios = [r["datapoints_per_s"] / theirs[r["round"]] for r in role["runs"] if theirs.get(r["round"])]
    return statistics.median(ratios) if ratios else None


def with_paired(value, paired):
    """A ratio of medians and, beside it, the median of the rounds' own ratios."""
    return fmt_ratio(value) + (" ({})".format(fmt_ratio(paired)) if paired is not None else "")


def history_text(stage):
    counts = [stage["start_count"]] + [n for _, n, _ in stage["history"][1:]]
    if len(counts) > 8:
        counts = counts[:3] + ["..."] + counts[-3:]
    return "->".join(str(c) for c in counts)


def search(pipeline, args, calibration):
    """The grid search (one run per point) and tune()'s choice: the settings to take turns."""
    spec = PIPELINES[pipeline]
    searched = []
    for stages in spec["grid"][:2] if args.quick else spec["grid"]:
        config = {"kind": "pinned", "stages": stages}
        result = measure(pipeline, config, args, calibration)
        searched.append({"setting": label(config), "config": config, "result": result})
        rate = result.get("error") or "{:.0f} datapoints/s".format(result["datapoints_per_s"])
        print("grid  {:<26} {:<18} {}".format(pipeline, label(config), rate), flush=True)
    measured = [s for s in searched if "error" not in s["result"]]
    best = max(measured, key=lambda s: s["result"]["datapoints_per_s"]) if measured else None
    tuned = measure(pipeline, {"kind": "tune"}, args, calibration)
    print("tune  {:<26} {}".format(pipeline, tuned.get("error") or tuned["label"]), flush=True)
    roles = {"hand": {"kind": "pinned", "stages": spec["hand"]}, "auto": {"kind": "auto", "label": "auto"}}
    if args.keep_workers:
        roles[KEPT_ROLE] = {"kind": "auto", "keep_workers": True, "label": KEPT_ROLE}
    if best is not None:
        roles["grid best"] = best["config"]
    if "error" not in tuned:
        roles["tune()"] = {"kind": "tune", "code": tuned["code"], "names": tuned["names"], "label": tuned["label"]}
    if not args.no_tfdata:
        roles["tf.data AUTOTUNE"] = {"kind": "tf.data", "label": "tf.data AUTOTUNE"}
    for k, name in enumerate(phase_names(pipeline)):          # the best fixed setting of each phase
        if measured:
            phase_best = max(measured, key=lambda s: s["result"]["phases"][k]["datapoints_per_s"])
            roles["best in phase {} ({})".format(k + 1, name)] = phase_best["config"]
    entry = {"grid": searched, "grid_best": best and best["setting"], "tune": tuned, "costs_ms": spec["costs"],
             "consumer": spec["consumer"], "hand": label(roles["hand"])}
    return roles, entry


def take_turns(roles, args, calibration):
    """``--repeats`` rounds; in each, every pipeline's distinct settings run once, in an order that
    rotates from round to round. Returns the runs and the errors by (pipeline, setting key)."""
    runs = {(p, key(c)): [] for p in roles for c in roles[p].values()}
    errors = {}
    for round_index in range(args.repeats):
        for pipeline in roles:
            configs = list({key(c): c for c in roles[pipeline].values()}.values())
            shift = round_index % len(configs)
            for config in configs[shift:] + configs[:shift]:
                if (pipeline, key(config)) in errors:
                    continue
                result = measure(pipeline, config, args, calibration)
                if "error" in result:
                    errors[pipeline, key(config)] = result["error"]
                    print("round {} {:<26} {:<24} ERROR {}".format(round_index + 1, pipeline, label(config)[:24],
                                                                    result["error"]), flush=True)
                    continue
                result["round"] = round_index
                runs[pipeline, key(config)].append(result)
                stages = "; ".join("{} {} (settled {:.1f} s)".format(s["stage"], history_text(s), s["settled_after_s"])
                                   for s in result["stages"])
                print("round {} {:<26} {:<24} {:8.0f} datapoints/s, step {:.2f} ms (work {:.2f}), others {:.2f} CPUs "
                      "{}".format(round_index + 1, pipeline, label(config)[:24], result["datapoints_per_s"],
                                  result["step_ms"], result["consumer_work_ms"], result["others_cpus"], stages),
                      flush=True)
    return runs, errors


def summarize(pipeline, roles, runs, errors, entry, check_ns):
    """Medians, spreads and ratios of one pipeline into ``entry``; its table rows."""
    per_role = {}
    for role, config in roles.items():
        results = runs[pipeline, key(config)]
        rates = [r["datapoints_per_s"] for r in results]
        per_role[role] = {
            "setting": label(config), "runs": results, "error": errors.get((pipeline, key(config))),
            "median_datapoints_per_s": statistics.median(rates) if rates else None,
            "spread_datapoints_per_s": [min(rates), max(rates)] if rates else None,
            "median_step_ms": statistics.median(r["step_ms"] for r in results) if results else None,
            "median_consumer_work_ms": statistics.median(r["consumer_work_ms"] for r in results) if results else None}
    entry["roles"] = per_role
    median = {role: info["median_datapoints_per_s"] for role, info in per_role.items()}
    entry["ratios"] = ratios = {
        "auto_vs_grid_best": ratio(median["auto"], median.get("grid best")),
        "auto_vs_hand": ratio(median["auto"], median["hand"]),
        "auto_vs_tfdata": ratio(median["auto"], median.get("tf.data AUTOTUNE")),
        "tune_vs_grid_best": ratio(median.get("tune()"), median.get("grid best")),
        "step_auto_vs_hand": ratio(per_role["auto"]["median_step_ms"], per_role["hand"]["median_step_ms"]),
        "step_auto_vs_grid_best": ratio(per_role["auto"]["median_step_ms"],
                                        (per_role.get("grid best") or {}).get("median_step_ms")),
        "consumer_work_auto_vs_hand": ratio(per_role["auto"]["median_consumer_work_ms"],
                                            per_role["hand"]["median_consumer_work_ms"]),
        "kept_workers_vs_grid_best": ratio(median.get(KEPT_ROLE), median.get("grid best")),
        "auto_vs_kept_workers": ratio(median["auto"], median.get(KEPT_ROLE))}
    # the same ratios round by round (the two runs of a round are minutes apart, where the host's
    # speed, which moves by a third over a run, moves less), then their median
    entry["paired_ratios"] = paired = {
        "auto_vs_grid_best": paired_ratio(per_role.get("auto"), per_role.get("grid best")),
        "tune_vs_grid_best": paired_ratio(per_role.get("tune()"), per_role.get("grid best")),
        "kept_workers_vs_grid_best": paired_ratio(per_role.get(KEPT_ROLE), per_role.get("grid best"))}
    cells = []
    for role in ROLES:
        info = per_role.get(role)
        if not info or info["median_datapoints_per_s"] is None:
            cells.append("error" if info and info["error"] else "n/a")
            continue
        rates = [r["datapoints_per_s"] for r in info["runs"]]
        text = "{:.0f} ({})".format(info["median_datapoints_per_s"], spread(rates))
        cells.append(text + (" [{}]".format(info["setting"].replace("tune: ", "")) if role in ("grid best", "tune()")
                             else ""))
    hand, auto = per_role["hand"], per_role["auto"]
    best = per_role.get("grid best") or {}
    step = ""
    if PIPELINES[pipeline]["consumer"] != "none" and hand["median_step_ms"] and auto["median_step_ms"]:
        step = "{:.2f} / {:.2f} / {} ({:.2f} / {:.2f})".format(
            hand["median_step_ms"], auto["median_step_ms"],
            "{:.2f}".format(best["median_step_ms"]) if best.get("median_step_ms") else "-",
            hand["median_consumer_work_ms"], auto["median_consumer_work_ms"])
    row = [pipeline, "{} [{}]".format(cells[0], hand["setting"])] + cells[1:] + [
        with_paired(ratios["auto_vs_grid_best"], paired["auto_vs_grid_best"]),
        with_paired(ratios["tune_vs_grid_best"], paired["tune_vs_grid_best"]),
        fmt_ratio(ratios["auto_vs_hand"]), fmt_ratio(ratios["auto_vs_tfdata"]), step]
    auto_rows = []
    entry["auto_stages"] = {}
    for stage in (auto["runs"][-1]["stages"] if auto["runs"] else []):
        name = stage["stage"]
        mine = [(r, s) for r in auto["runs"] for s in r["stages"] if s["stage"] == name]
        settled = [s["settled_after_s"] for _, s in mine]
        shares = [s["controller_cpu_share_of_a_core"] + check_ns * 1e-9 * r["datapoints_per_s"] for r, s in mine]
        entry["auto_stages"][name] = {"settled_after_s": settled, "controller_share_of_a_core_with_checks": shares,
                                      "last_history": stage["history"]}
        auto_rows.append([pipeline, name, history_text(stage), "{:.1f}".format(stage["mean_count_in_window"]),
                          "{:.1f} ({})".format(statistics.median(settled), spread(settled, "{:.1f}")),
                          stage["changes_in_window"],
                          "{:.0f}".format(statistics.median(r["from_start_datapoints_per_s"] for r in auto["runs"])),
                          "{:.3f}%".format(100 * statistics.median(shares)),
                          "{:.0f}".format(stage["controller_us_per_decision"])])
    return row, auto_rows, phase_rows(pipeline, per_role, entry)


def phase_rows(pipeline, per_role, entry):
    """For a pipeline whose cost changes: each role's median rate per phase, and auto against the
    best fixed setting of that phase (the grid's best over the phases' own rates, run in the rounds)."""
    names = phase_names(pipeline)
    if not names:
        return []
    rows, entry["phases"] = [], {}
    for k, name in enumerate(names):
        medians = {}
        for role, info in per_role.items():
            rates = [r["phases"][k]["datapoints_per_s"] for r in info["runs"] if r.get("phases")]
            if rates:
                medians[role] = (statistics.median(rates), min(rates), max(rates), info["setting"])
        phase_best = "best in phase {} ({})".format(k + 1, name)
        best_fixed = max((v for role, v in medians.items() if role not in ("auto", KEPT_ROLE, "tune()", "tf.data AUTOTUNE")),
                         key=lambda v: v[0], default=None)
        entry["phases"][name + " #{}".format(k + 1)] = {
            "medians": {role: v[0] for role, v in medians.items()},
            "best_fixed": best_fixed and {"setting": best_fixed[3], "median": best_fixed[0]},
            "auto_vs_best_fixed": ratio(medians.get("auto", (None,))[0], best_fixed and best_fixed[0])}

        def cell(role, medians=medians):
            v = medians.get(role)
            return "{:.0f} ({:.0f}-{:.0f})".format(*v[:3]) if v else "-"
        rows.append([pipeline, "{} {}".format(k + 1, name), cell("auto"), cell("grid best"),
                     "{} [{}]".format(cell(phase_best), medians[phase_best][3]) if phase_best in medians else "-",
                     "{:.0f} [{}]".format(best_fixed[0], best_fixed[3]) if best_fixed else "-", cell("tune()"),
                     cell("tf.data AUTOTUNE"), fmt_ratio(entry["phases"][name + " #{}".format(k + 1)]["auto_vs_best_fixed"])])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed window of each run")
    parser.add_argument("--warmup", type=float, default=1.5, help="warm-up of pinned settings (s)")
    parser.add_argument("--auto-warmup", type=float, default=4.0, help="warm-up of auto and tf.data (s)")
    parser.add_argument("--tune-seconds", type=float, default=4.0, help="tune(df, seconds=...)")
    parser.add_argument("--phase-seconds", type=float, default=6.0,
                        help="seconds of each phase of the pipeline whose cost changes (the window is all of them)")
    parser.add_argument("--pipelines", nargs="+", default=list(PIPELINES), choices=list(PIPELINES))
    parser.add_argument("--no-tfdata", action="store_true", help="skip tf.data")
    parser.add_argument("--keep-workers", action="store_true",
                        help='also run "auto" with Autoscale(min_workers=1), which never maps in the consumer\'s thread')
    parser.add_argument("--quick", action="store_true", help="one round of short runs, two grid points: every path")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return run_child(args.child)
    if args.quick:
        args.repeats, args.seconds, args.warmup, args.auto_warmup, args.tune_seconds = 1, 0.5, 0.3, 1.2, 1.0
        args.phase_seconds = 1.0
    from tabulate import tabulate

    began = time.time()
    calibration, check_ns = calibrate(), check_cost_ns()
    print("calibration: {:.0f} spin iterations/ms, {:.2f} 256x256 matmuls/ms; an auto stage's checks per datapoint "
          "{:.0f} ns".format(calibration["spin_per_ms"], calibration["matmul_per_ms"], check_ns), flush=True)
    report = {"benchmark": "autotune", "args": vars(args), "calibration": calibration,
              "check_ns_per_datapoint": check_ns,
              "machine": {"cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
                          "platform": platform.platform(), "python": platform.python_version(),
                          "load_at_start": os.getloadavg()}, "pipelines": {}}
    roles = {}
    for pipeline in args.pipelines:
        roles[pipeline], report["pipelines"][pipeline] = search(pipeline, args, calibration)
    runs, errors = take_turns(roles, args, calibration)
    rows, auto_rows, phase_table = [], [], []
    for pipeline in args.pipelines:
        row, stage_rows, phases = summarize(pipeline, roles[pipeline], runs, errors, report["pipelines"][pipeline],
                                            check_ns)
        rows.append(row)
        auto_rows += stage_rows
        phase_table += phases
    loads = [r["others_cpus"] for results in runs.values() for r in results]
    report["others_cpus_during_runs"] = {"min": min(loads), "median": statistics.median(loads), "max": max(loads)} \
        if loads else None

    print()
    print(tabulate(rows, headers=["pipeline", "hand dp/s [setting]", "auto dp/s", "grid best dp/s [setting]",
                                  "tune() dp/s [setting]", "tf.data AUTOTUNE dp/s",
                                  "auto / grid best (>= 0.95) (round by round)",
                                  "tune() / grid best (>= 0.95) (round by round)", "auto / hand (>= 1)", "auto / tf.data (> 1)",
                                  "step ms hand / auto / grid best (consumer work hand / auto)"],
                   tablefmt="github"))
    print("dp/s: datapoints the consumer took per second, median (min-max) over {} round(s); step: wall ms per "
          "datapoint in the consumer, of it the consumer's own work; (round by round): the median of the ratios of the runs of "
          "one round (minutes apart, where the host's speed moves less than over the whole run). Other programs' load during the counted windows "
          "(CPUs busy outside the benchmark): {}".format(
              args.repeats, "min {min:.2f}, median {median:.2f}, max {max:.2f}".format(
                  **report["others_cpus_during_runs"]) if loads else "-"))
    kept_rows = [[pipeline, "{:.0f} ({})".format(info["median_datapoints_per_s"],
                                                   spread(info["spread_datapoints_per_s"] or [])),
                    history_text(info["runs"][-1]["stages"][0]) if info["runs"] and info["runs"][-1]["stages"] else "-",
                    with_paired(entry["ratios"]["kept_workers_vs_grid_best"],
                                entry["paired_ratios"]["kept_workers_vs_grid_best"]),
                    fmt_ratio(entry["ratios"]["auto_vs_kept_workers"])]
                   for pipeline in args.pipelines
                   for entry in [report["pipelines"][pipeline]]
                   for info in [entry["roles"].get(KEPT_ROLE)] if info and info["median_datapoints_per_s"]]
    if kept_rows:
        print('\n"auto" with Autoscale(min_workers=1) (never 0 workers), dp/s median (min-max):')
        print(tabulate(kept_rows, headers=["pipeline", KEPT_ROLE, "workers over time (last round, first stage)",
                                           "/ grid best (round by round)", "auto / it"],
                       tablefmt="github"))
    if phase_table:
        print("\nPer phase of the pipeline whose cost changes (dp/s, median (min-max)); best fixed: the best of "
              "the fixed settings run in the rounds, in that phase:")
        print(tabulate(phase_table, headers=["pipeline", "phase", "auto", "grid best (overall)",
                                             "best fixed in this phase [setting]", "best fixed [setting]", "tune()",
                                             "tf.data AUTOTUNE", "auto / best fixed"], tablefmt="github"))
    print("\n\"auto\" per stage (workers over time: the last round's history; settled: seconds from the start to the "
          "last change, median (min-max) over the rounds; from start: datapoints/s over warm-up and window; "
          "controller: CPU of its decisions plus {:.0f} ns of checks per datapoint, median share of one core, "
          "target < 1% of a worker's):".format(check_ns))
    print(tabulate(auto_rows, headers=["pipeline", "stage", "workers over time", "mean in window", "settled after s",
                                       "changes in window", "dp/s from start", "controller CPU of a core",
                                       "us per decision"], tablefmt="github"))
    for pipeline in args.pipelines:
        tuned = report["pipelines"][pipeline]["tune"]
        if "printed" in tuned:
            print("\ntune() on {} ({}):\n{}".format(pipeline, report["pipelines"][pipeline]["hand"], tuned["printed"]))
    if errors:
        print("\nerrors: " + "; ".join("{} {}: {}".format(p, k, e) for (p, k), e in errors.items()))
    report["seconds_total"] = time.time() - began
    report["machine"]["load_at_end"] = os.getloadavg()
    # a run of some of the pipelines does not replace the full run's file
    name = "autotune.json" if set(args.pipelines) == set(PIPELINES) else time.strftime("autotune-%Y-%m-%d-%H%M.json")
    path = os.path.join(tempfile.gettempdir() if args.quick else os.path.join(HERE, "results"), name)
    with open(path, "w") as f:
        json.dump(report, f, indent=1, default=str)
    print("wrote {} ({:.0f} s in all)".format(path, report["seconds_total"]))


if __name__ == "__main__":
    main()
