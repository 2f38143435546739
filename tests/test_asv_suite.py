"""The asv suite and its history: the benchmarks are well formed (``asv check``), the GPU suites skip without a GPU
and their code runs (here on the exact CPU backend, at small sizes), ``asv publish`` builds the pages from the
committed results, and the history script's helpers answer as git and asv expect."""

import importlib
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "asv_bench" / "results"


def _asv(*args, timeout=600):
    if importlib.util.find_spec("asv") is None and os.environ.get("CI") != "true":
        pytest.skip("asv is not installed (pip install 'maskattn[test]')")
    return subprocess.run([sys.executable, "-m", "asv", *args], cwd=ROOT / "asv_bench", capture_output=True,
                          text=True, timeout=timeout)


def test_asv_check():
    result = _asv("check", "-E", f"existing:{sys.executable}")
    assert result.returncode == 0, result.stdout + result.stderr


def test_asv_publish_builds_the_pages_from_the_committed_results(tmp_path):
    machines = [p.name for p in RESULTS.iterdir() if p.is_dir()] if RESULTS.is_dir() else []
    assert machines, "asv_bench/results/ holds no machine's results"
    result = _asv("publish", "--html-dir", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "index.html").is_file()
    index = json.loads((tmp_path / "index.json").read_text())
    assert set(machines) <= set(index["params"]["machine"])
    # a graph per benchmark and machine: [[revision, [value per parameter set]], ...], with points on commits
    graphs = [g for g in (tmp_path / "graphs").rglob("compile.CompileMask.time_compile.json")
              if "machine-dev-2core" in g.parts]
    assert graphs, "no graph data for compile.CompileMask.time_compile on dev-2core"
    points = [p for g in graphs for p in json.loads(g.read_text()) if any(v is not None for v in p[1])]
    assert len(points) >= 2


def _import_from(folder, name):
    """Module ``name`` found in ``folder`` (sys.path restored after the test)."""
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))


@pytest.fixture
def suites():
    """The asv benchmark package, imported as asv imports it."""
    yield from _import_from(ROOT / "asv_bench", "benchmarks")


def test_gpu_suites_skip_without_a_gpu(suites):
    gpu = importlib.import_module("benchmarks.gpu")
    attention = importlib.import_module("benchmarks.gpu_attention")
    decode = importlib.import_module("benchmarks.gpu_decode")
    try:
        gpu.cupy_or_skip()
        pytest.skip("CuPy and a GPU are here")
    except NotImplementedError:
        pass
    with pytest.raises(NotImplementedError):
        attention.Forward().setup("causal", 4096, 128)
    for measure, cls, params in ((attention.measure_rates, attention.Rates, ("causal", 4096, 128)),
                                 (decode.measure_bandwidth, decode.DecodeBandwidth, (4096,))):
        table = measure(None)
        assert "skip" in table
        with pytest.raises(NotImplementedError):
            cls().setup(table, *params)


class _NoDevice:
    """What the GPU suites ask of CuPy beyond the arrays, as no-ops."""

    @staticmethod
    def get_default_memory_pool():
        return type("Pool", (), {"free_all_blocks": staticmethod(lambda: None)})


def _host_arrays(cupy, shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape, dtype=np.float32) for shape in shapes]


def _host_ms(cupy, fn, **kwargs):
    for f in fn if isinstance(fn, list) else [fn]:
        f()
    return 1.0


def test_gpu_suites_run_on_the_cpu_backend(suites, monkeypatch):
    """Every workload through the suites' own setup, timed call and rates table, on float32 NumPy arrays (the exact CPU
    backend) at a small size; the GPU helpers replaced by host ones."""
    attention = importlib.import_module("benchmarks.gpu_attention")
    decode = importlib.import_module("benchmarks.gpu_decode")
    for module in (attention, decode):
        monkeypatch.setattr(module, "cupy_or_skip", lambda: _NoDevice)
        monkeypatch.setattr(module, "random_arrays", _host_arrays)
        monkeypatch.setattr(module, "gpu_ms", _host_ms)
    monkeypatch.setattr(attention, "synchronize", lambda cupy: None)
    monkeypatch.setattr(decode, "synchronize", lambda cupy: None)
    monkeypatch.setattr(attention, "SIZES", [256])
    monkeypatch.setattr(attention, "HEAD_DIMS", [32])
    monkeypatch.setattr(attention, "HEADS", {32: 2})

    table = attention.measure_rates(None)
    for name in attention.WORKLOADS:
        row = table[name, 256, 32]
        assert isinstance(row, dict), f"{name}: {row}"
        rates = attention.Rates()
        rates.setup(table, name, 256, 32)
        assert rates.track_forward_tflops(table, name, 256, 32) > 0
        assert rates.track_forward_backward_tflops(table, name, 256, 32) > 0
    for cls, method in ((attention.Forward, "time_forward"), (attention.ForwardBackward, "time_forward_backward")):
        bench = cls()
        bench.setup("doc_causal", 256, 32)
        getattr(bench, method)("doc_causal", 256, 32)

    monkeypatch.setattr(decode, "HEAD_DIM", 32)
    monkeypatch.setattr(decode, "PREFIXES", [128])
    monkeypatch.setattr(decode, "TREE_BATCHES", [2])
    monkeypatch.setattr(decode, "CACHES", [512])
    monkeypatch.setattr(decode, "l2_bytes", lambda cupy: 1 << 20)
    table = decode.measure_bandwidth(None)
    assert isinstance(table["tree", 128, 2], float) and isinstance(table["decode", 512], float), table
    tree = decode.TreeVerification()
    tree.setup(128, 2)
    tree.time_tree(128, 2)
    step = decode.Decode()
    step.setup(512)
    step.time_decode(512)


def _git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def test_history_git_answers_as_git(tmp_path):
    """scripts/asv_history_git.py, which stands in for git where the GPU machine has none, answers asv's queries as
    git does."""
    if _git("rev-parse", "HEAD~1").returncode != 0:
        pytest.skip("no git history here")
    hashes = _git("log", "-2", "--format=%H").stdout.split()
    table = tmp_path / "commits.tsv"
    table.write_text("".join(f"{h}\t{_git('log', '-1', '--format=%at', h).stdout.strip()}\tgpu\tsubject\n"
                             for h in hashes))
    script = [sys.executable, str(ROOT / "scripts" / "asv_history_git.py"), str(table)]
    for args in (["rev-parse", f"{hashes[1][:8]}^{{commit}}"], ["rev-parse", "HEAD^{commit}"],
                 ["rev-list", "-n", "1", "--format=%at", hashes[1]]):
        ours = subprocess.run(script + args, capture_output=True, text=True)
        assert (ours.returncode, ours.stdout) == (0, _git(*args).stdout), args
    unknown = subprocess.run(script + ["rev-parse", "0000000^{commit}"], capture_output=True, text=True)
    assert unknown.returncode != 0 and unknown.stdout.strip() == "0000000^{commit}"  # asv reads "no such name"
    assert subprocess.run(script + ["config", "init.defaultBranch"]).returncode != 0


@pytest.fixture
def history_results():
    yield from _import_from(ROOT / "scripts", "asv_history_results")


def test_history_summary_reads_the_committed_results(history_results):
    host = re.search(r"^dev-2core: (\d+) commits", history_results.summary(RESULTS), flags=re.M)
    assert host and int(host.group(1)) >= 20


def test_history_fold_merges_parameter_sets(history_results):
    """A second run of other parameter sets (NaN where it did not run) adds to a commit's results, wiping nothing."""
    nan = float("nan")
    columns = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a"]

    def results(values, version="v1"):
        return {"result_columns": columns, "durations": {},
                "results": {"b": [values, [["'x'", "'y'"]], version, 1, 2.0, values]}}

    merged = history_results.merge(results([1.0, nan]), results([nan, 2.0]))
    assert merged["results"]["b"][0] == [1.0, 2.0] and merged["results"]["b"][5] == [1.0, 2.0]
    merged = history_results.merge(results([1.0, nan]), results([nan, 2.0], version="v2"))
    assert merged["results"]["b"][0][1] == 2.0 and merged["results"]["b"][0][0] != 1.0
