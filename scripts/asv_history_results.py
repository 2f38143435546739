"""asv results of ``scripts/asv_history.sh``: fold a run's results into a results folder, and say what one holds.

    python3 scripts/asv_history_results.py summary [asv_bench/results]
    python3 scripts/asv_history_results.py fold FROM_RESULTS INTO_RESULTS

``summary``: per machine its commits (newest first) with the benchmarks that gave a number, and, where the GPU suites
ran, the commits whose forward timings cover every workload at n = 16384, D = 128. ``fold``: a commit's results
file that exists on both sides is merged parameter set by parameter set (a run of some parameter sets writes NaN for
the others, which must not wipe what an earlier run recorded); the rest is copied.
"""

import datetime
import json
import pathlib
import shutil
import sys

FORWARD = "gpu_attention.Forward.time_forward"
ONE_SIZE = {"medusa"}  # runs at n = 4096 only (asv_bench/benchmarks/common.py)


def _values(entry, columns):
    """The result values of one benchmark in a results file, flattened (a list for parametrised benchmarks)."""
    result = entry[columns.index("result")] if isinstance(entry, list) else entry
    return result if isinstance(result, list) else [result]


def _number(value):
    return value is not None and value == value  # asv writes NaN where a benchmark was skipped or failed


def forward_complete(data):
    """Whether the file has a forward timing for every workload (but the one-size ones) at n = 16384, D = 128."""
    columns = data["result_columns"]
    entry = data["results"].get(FORWARD)
    if entry is None:
        return False
    params = entry[columns.index("params")]
    values = _values(entry, columns)
    index = 0
    complete = True
    for workload in params[0]:
        for n in params[1]:
            for head_dim in params[2]:
                if (n, head_dim) == ("16384", "128") and workload.strip("'") not in ONE_SIZE:
                    complete &= _number(values[index])
                index += 1
    return complete


def summary(results_dir):
    lines = []
    for machine in sorted(p for p in pathlib.Path(results_dir).iterdir() if p.is_dir()):
        files = [json.loads(f.read_text()) for f in machine.glob("*.json") if f.name != "machine.json"]
        files.sort(key=lambda d: d["date"], reverse=True)
        info = json.loads((machine / "machine.json").read_text()) if (machine / "machine.json").exists() else {}
        lines.append(f"{machine.name}: {len(files)} commits ({info.get('cpu', '?')})")
        for data in files:
            columns = data["result_columns"]
            numbers = sum(_number(v) for entry in data["results"].values() for v in _values(entry, columns))
            date = datetime.datetime.fromtimestamp(data["date"] / 1000, datetime.timezone.utc)
            mark = "  forward 16384/128 complete" if forward_complete(data) else ""
            lines.append(f"  {data['commit_hash'][:8]} {date:%Y-%m-%d %H:%M} {numbers:5d} numbers{mark}")
        complete = sum(forward_complete(d) for d in files)
        if any(FORWARD in d["results"] for d in files):
            lines.append(f"  commits with forward timings for every workload at n = 16384, D = 128: {complete}")
    return "\n".join(lines)


def merge(old, new):
    """``new``'s numbers over ``old``'s (two results files of one commit and machine), per parameter set; a benchmark
    whose code changed (another version) is taken from ``new`` whole."""
    columns = old["result_columns"]
    if new["result_columns"] != columns:
        return new
    at = {name: i for i, name in enumerate(columns)}
    for name, entry in new["results"].items():
        before = old["results"].get(name)
        if before is None or _column(before, at["version"]) != _column(entry, at["version"]):
            old["results"][name] = entry
            continue
        before = before + [None] * (len(columns) - len(before))
        entry = entry + [None] * (len(columns) - len(entry))
        values = entry[at["result"]]
        if not isinstance(values, list):
            if _number(values):
                old["results"][name] = entry
            continue
        for column, i in at.items():
            if column == "params":
                continue
            if isinstance(entry[i], list) and len(entry[i]) == len(values):
                merged = list(before[i]) if isinstance(before[i], list) else [None] * len(values)
                for k, value in enumerate(values):
                    if _number(value):
                        merged[k] = entry[i][k]
                before[i] = merged
            elif column in ("started_at", "duration") and any(_number(v) for v in values):
                before[i] = entry[i]
        while before and before[-1] is None:  # as asv writes an entry: without its trailing empty columns
            before.pop()
        old["results"][name] = before
    old.setdefault("durations", {}).update(new.get("durations", {}))
    return old


def _column(entry, i):
    return entry[i] if i < len(entry) else None


def fold(source, target):
    """Fold results folder ``source`` (one run's) into ``target``."""
    source, target = pathlib.Path(source), pathlib.Path(target)
    target.mkdir(parents=True, exist_ok=True)
    for machine in (p for p in source.iterdir() if p.is_dir()):
        (target / machine.name).mkdir(exist_ok=True)
        for path in machine.glob("*.json"):
            into = target / machine.name / path.name
            if path.name != "machine.json" and into.exists():
                merged = merge(json.loads(into.read_text()), json.loads(path.read_text()))
                into.write_text(json.dumps(merged))  # as asv writes results: compact, in its order
            else:
                shutil.copy(path, into)
    if (source / "benchmarks.json").exists():  # the suite the run discovered
        shutil.copy(source / "benchmarks.json", target / "benchmarks.json")


if __name__ == "__main__":
    command, *paths = sys.argv[1:] or ["summary"]
    if command == "fold":
        fold(*paths)
        paths = paths[1:]
    print(summary(paths[0] if paths else "asv_bench/results"))
