"""What an asv results folder holds, per machine: its commits (newest first) with the benchmarks that gave a number,
and, where the GPU suites ran, the commits whose forward timings cover every workload at n = 16384, D = 128.

    python3 scripts/asv_history_summary.py [asv_bench/results]
"""

import datetime
import json
import pathlib
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


if __name__ == "__main__":
    print(summary(sys.argv[1] if len(sys.argv) > 1 else "asv_bench/results"))
