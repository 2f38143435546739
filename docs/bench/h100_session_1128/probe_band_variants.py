"""probe_band.py's masks under several kernel-source folders (MASKATTN_KERNEL_SOURCES), one process per folder and
round, the folders in turns; the last line of each process (its medians) collected into one table.

    python3 docs/bench/h100_session_1128/probe_band_variants.py ROUNDS MASKS FOLDER [FOLDER ...]"""
import json
import os
import statistics
import subprocess
import sys

rounds, only, folders = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe_band.py")
times = {folder: {} for folder in folders}
for r in range(rounds):
    for folder in folders:
        env = dict(os.environ, MASKATTN_KERNEL_SOURCES=os.path.abspath(folder))
        done = subprocess.run([sys.executable, probe, only], env=env, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{folder} failed:\n{done.stderr[-2000:]}")
        for name, ms in json.loads(done.stdout.strip().splitlines()[-1]).items():
            times[folder].setdefault(name, []).append(ms)
        print(f"round {r} {folder}: {done.stdout.strip().splitlines()[-1]}", file=sys.stderr, flush=True)
names = list(times[folders[0]])
print("| mask | " + " | ".join(folders) + " |")
print("| --- |" + " --- |" * len(folders))
for name in names:
    print(f"| {name} | " + " | ".join(" / ".join(f"{t:.3f}" for t in times[f][name]) + f" (med {statistics.median(times[f][name]):.3f})"
                                    for f in folders) + " |")
