"""A/B timing of the CUDA kernels built from two kernel-source folders, in one GPU machine call: a baseline folder
against the installed sources (the working tree), in turns, on the same cases and inputs.

    git archive HEAD gpu | tar -x -C .whl/base     # on the host: the GPU machine's copy of the tree has no history
    python3 scripts/kernel_ab.py .whl/base/gpu [VARIANT_DIR ...] [--rounds 2] [--backward [--deterministic]]
                                 [--only SUBSTRINGS] [--control]

Where the kernels' host side changed too (launch geometry, tensor maps, shared-memory sizes), a folder must run with
its own package: install its tree elsewhere and pair the two with ``--site FOLDER SITE`` (that folder's process then
imports maskattn from SITE, with the kernel sources installed with it; repeat for several, e.g. to bisect commits;
``--env FOLDER KEY=VALUE`` sets a variable in a folder's process, e.g. a host knob, with a copy of a folder per value):

    git archive HEAD meson.build pyproject.toml setup.cfg python maskprep gpu README.md | tar -x -C .whl/basetree
    pip install --no-build-isolation --no-deps --no-index -q --target /tmp/base_site .whl/basetree   # on the GPU
    python3 scripts/kernel_ab.py .whl/basetree/gpu --site .whl/basetree/gpu /tmp/base_site --backward

The folders that need no package or variable of their own (the baseline, any variants, the tree) run in one
process, in turns sample by sample: each case's inputs are made once, then each round takes 20 samples of every side
after 3 warm-up calls, the sides in turns (``MASKATTN_KERNEL_SOURCES`` switched between them; the kernel caches keep
each folder's builds apart), a sample the mean of a burst of 5 calls between two CUDA events (scripts/gpu_timing.py's
``medians_in_turns``; bf16, B = 1). A folder with ``--site`` or ``--env`` runs in a process of its own, one per round,
beside that process. The table gives each side's median per round and its time over the baseline's, from the
medians over rounds. ``--control`` adds a copy of the baseline folder as a side of the shared process: identical
kernels timed as if they were a variant, so the run shows its own noise floor beside its ratios (two H100 calls of
2026-11-28 read such a copy at 0.988-1.019 on the backward). A side in a process of its own is not in turns with the
others: on an H200 (2026-11-29 (m)) the same kernel read 1-5% faster there than in the shared process, so compare
such sides against a copy of the baseline in the same kind of process. Timings only: the tests check correctness.
"""

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

# (workload, n, heads, head dim); the forward of each, and with --backward the default backward of the first rows
# (one pass on Hopper) and the deterministic one of full D=128 (with --deterministic, of every backward row)
FORWARD = [
    ("full", 16384, 16, 128),
    ("causal", 16384, 16, 128),
    ("swa", 16384, 16, 128),
    ("doc_causal", 16384, 16, 128),
    ("full", 8192, 32, 64),
    ("causal", 8192, 32, 64),
    ("causal", 16384, 16, 64),
    ("full", 16384, 16, 96),
    ("causal", 16384, 16, 96),
    ("full", 8192, 16, 192),
    ("full", 8192, 16, 256),
    ("causal", 8192, 16, 192),
    ("causal", 8192, 16, 256),
    ("bigbird", 16384, 16, 128),
    ("shared_question", 16384, 16, 128),
    ("graph_rcm", 16384, 16, 128),  # plans with a node order: rows gathered through perm
    ("graph_rcm", 8192, 32, 64),
    ("lf_dilated", 16384, 16, 128),
]
# the forward-only tiles (tile_for(..., training=False): 192 x 128 at D <= 64, 192 x 112 at D = 96, 128 x 176 at
# D = 128 (without partial tiles), 128 x 112 at D = 192, 128 x 80 at 256), as the bench's forward takes them there
FORWARD_ONLY = [("full", 8192, 32, 64), ("causal", 8192, 32, 64), ("doc_causal", 16384, 16, 64),
                ("full", 16384, 16, 96), ("full", 16384, 16, 128), ("full", 8192, 16, 192), ("causal", 8192, 16, 192),
                ("full", 8192, 16, 256), ("causal", 8192, 16, 256)]
BACKWARD = FORWARD[:9] + [("doc_causal", 16384, 16, 64), ("bigbird", 16384, 16, 128),
                          ("shared_question", 16384, 16, 128), ("doc_causal", 16384, 16, 96)] + FORWARD[-3:]


def time_cases(sides: dict, rounds: int, backward: bool, only: str, every_deterministic: bool = False) -> dict:
    """{side: {case: [ms per round]}}; ``sides`` maps a side's name to its kernel-source folder (None: the installed
    sources), timed in turns within each case."""
    import cupy as cp
    import ml_dtypes
    import numpy as np

    from maskattn import compile_mask
    from maskattn.backends import cuda
    from maskattn.bench import workloads

    from gpu_timing import inputs, medians_in_turns  # scripts/ is on the path of a script run from there

    bf16 = np.dtype(ml_dtypes.bfloat16)

    runs = [(f"fwd {workload} {n // 1024}k D={d}", workload, n, h, d, None, True) for workload, n, h, d in FORWARD]
    runs += [(f"fwdonly {workload} {n // 1024}k D={d}", workload, n, h, d, None, False)
             for workload, n, h, d in FORWARD_ONLY]
    if backward:
        runs += [(f"bwd {workload} {n // 1024}k D={d}", workload, n, h, d, False, True)
                 for workload, n, h, d in BACKWARD]
        runs += [(f"bwd deterministic {workload} {n // 1024}k D={d}", workload, n, h, d, True, True)
                 for workload, n, h, d in (BACKWARD if every_deterministic else BACKWARD[:1])]
    times = {side: {} for side in sides}
    for label, workload, n, h, d, deterministic, training in runs:
        if not any(part in label for part in only.split(",")):
            continue
        plan = compile_mask(workloads.build(workload, n), tile=cuda.tile_for(d, bf16, training=training))
        q, k, v, do = inputs(4, (1, h, n, d), bf16, np.random.default_rng(0))
        out, lse = cuda.forward(q, k, v, plan, d ** -0.5)

        def call(folder):
            def run():
                if folder is None:
                    os.environ.pop("MASKATTN_KERNEL_SOURCES", None)
                else:
                    os.environ["MASKATTN_KERNEL_SOURCES"] = folder
                if deterministic is None:
                    cuda.forward(q, k, v, plan, d ** -0.5, out=out)
                else:
                    cuda.backward(do, q, k, v, out, lse, plan, d ** -0.5, deterministic)
            return run

        calls = {side: call(folder) for side, folder in sides.items()}
        for _ in range(rounds):
            for side, ms in medians_in_turns(calls).items():
                times[side].setdefault(label, []).append(ms)
        # each case's times as they come, so that a run cut short by a time limit keeps what it measured
        print(label, json.dumps({side: times[side][label] for side in sides}), file=sys.stderr, flush=True)
        q = k = v = do = out = lse = calls = None  # the closures hold them: release before freeing the pool
        cp.get_default_memory_pool().free_all_blocks()
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", help="folders of .cu / .cuh files: the baseline, then any variants")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--deterministic", action="store_true",
                        help="with --backward, time the deterministic backward of every backward case too")
    parser.add_argument("--only", default="",
                        help="time only the cases whose label contains this (or one of several, comma-separated)")
    parser.add_argument("--site", nargs=2, action="append", default=[], metavar=("FOLDER", "SITE"),
                        help="run FOLDER's side with the maskattn package installed in SITE")
    parser.add_argument("--env", nargs=2, action="append", default=[], metavar=("FOLDER", "KEY=VALUE"),
                        help="set an environment variable in FOLDER's side (repeatable; e.g. a host knob)")
    parser.add_argument("--control", action="store_true",
                        help="time a copy of the baseline folder beside it too: an A/A side, the run's own noise floor")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # JSON {side: folder or null}, timed in one process
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(time_cases(json.loads(args.worker), args.rounds, args.backward, args.only,
                                    args.deterministic)))
        return
    folders = [os.path.abspath(folder) for folder in args.folders]
    for folder in folders:
        if not os.path.isfile(os.path.join(folder, "fwd_sm90.cu")):
            sys.exit(f"{folder} holds no fwd_sm90.cu: not a kernel-source folder")
    sites = {os.path.abspath(folder): site for folder, site in args.site}
    envs = {}
    for folder, setting in args.env:
        key, _, value = setting.partition("=")
        envs.setdefault(os.path.abspath(folder), {})[key] = value
    for option, named in (("--site", sites), ("--env", envs)):
        for folder in named:
            if folder not in folders:
                sys.exit(f"{option} names {folder}, which is not one of the folders")
    sides = {os.path.relpath(folder): folder for folder in folders} | {"tree": None}
    if args.control:  # the same sources in a folder of their own: the kernel caches load them apart
        copies = tempfile.mkdtemp(prefix="kernel_ab_")
        atexit.register(shutil.rmtree, copies, True)
        control = os.path.join(copies, "control")
        shutil.copytree(folders[0], control)
        sides = {os.path.relpath(folders[0]): folders[0], "control": control} | sides
    # one process for the sides that need nothing of their own, timed in turns inside it; one for each other side:
    # (its sides, its variables, the site it imports maskattn from)
    shared = {side: folder for side, folder in sides.items() if folder not in sites and folder not in envs}
    processes = [(shared, {}, None)] + [({side: None if folder in sites else folder}, envs.get(folder, {}),
                                         sites.get(folder)) for side, folder in sides.items() if side not in shared]
    process_rounds = args.rounds if len(processes) == 1 else 1
    results = {side: [] for side in sides}
    for round_ in range(args.rounds // process_rounds):
        for process_sides, process_env, site in processes:
            env = {key: value for key, value in os.environ.items() if key != "MASKATTN_KERNEL_SOURCES"}
            if site is not None:
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [site, env.get("PYTHONPATH")]))
            env.update(process_env)
            command = [sys.executable, __file__, folders[0], "--worker", json.dumps(process_sides), "--only",
                       args.only, "--rounds", str(process_rounds)]
            if args.backward:
                command.append("--backward")
            if args.deterministic:
                command.append("--deterministic")
            done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True)  # its stderr: progress
            if done.returncode != 0:
                sys.exit(f"{', '.join(process_sides)} round {round_} failed (its stderr above)")
            for side, cases in json.loads(done.stdout.strip().splitlines()[-1]).items():
                for r in range(process_rounds):
                    results[side].append({label: ms[r] for label, ms in cases.items()})
    print(json.dumps(results), file=sys.stderr)
    names = list(sides)
    print(f"| case ({args.rounds} rounds, ms) | " + " | ".join(names) + " | "
          + " | ".join(f"{name} / {names[0]}" for name in names[1:]) + " |")
    print("| --- " * (2 * len(names)) + "|")
    for label in results["tree"][0]:
        times = {side: [r[label] for r in results[side]] for side in names}
        base = statistics.median(times[names[0]])
        print(f"| {label} | " + " | ".join(" / ".join(f"{t:.3f}" for t in times[side]) for side in names) + " | "
              + " | ".join(f"{statistics.median(times[side]) / base:.3f}" for side in names[1:]) + " |")


if __name__ == "__main__":
    main()
