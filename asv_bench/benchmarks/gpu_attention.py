"""Attention on the GPU for every workload of WORKLOADS.md: forward and forward+backward, bf16, B = 1, on CuPy arrays.

Shapes: n = 4096 and 16384 tokens; head dim 128 with 16 heads and head dim 64 with 32 heads (a model width of 2048,
as WORKLOADS.md's two tables). ``medusa`` (a 340-token tree over a 4096-token prefix) has one size and runs at
n = 4096 only.

- ``Forward.time_forward`` / ``ForwardBackward.time_forward_backward``: wall time of one call, synchronised inside
  the timed call (host time of a prepared call included), after a setup that compiled the plan and the kernels and
  ran the call twice. asv runs each parameter set in a process of its own, so each compiles its own kernels (one
  forward, or one forward and three backward modules).
- ``Rates``: TFLOP/s of every case, each timed with CUDA events (median of 10 calls) inside one process per run
  (``setup_cache``), which builds every kernel configuration once; the ``track_*`` benchmarks only read the table.
  FLOPs count the pairs of the tiles the plan lists (``BlockMask.stats``), the backward as 2.5x the forward, as
  ``python -m maskattn bench`` does.

Without CuPy or a GPU every setup raises ``NotImplementedError``: asv skips these benchmarks (``asv check`` and
the host suites still run).
"""

import maskattn

from .common import ONE_SIZE, WORKLOADS, workloads
from .gpu import cupy_or_skip, gpu_ms, kernels_built, random_arrays, synchronize

SIZES = [4096, 16384]
HEAD_DIMS = [64, 128]
HEADS = {64: 32, 128: 16}
TILE = (128, 128)  # the training tile of head dims 64 and 128 on sm_80 / sm_90 (what FLOPs are counted on)
BACKWARD_FLOPS = 2.5  # the backward's FLOPs over the forward's


def _case(name, n, head_dim, seed=0):
    """(spec, q, k, v, do) of one case, or NotImplementedError where it does not exist."""
    if name in ONE_SIZE and n != SIZES[0]:
        raise NotImplementedError(f"{name} has one size, n = {SIZES[0]}")
    cupy = cupy_or_skip()
    spec = workloads.build(name, n, seed=seed)
    n_q, n_k = spec.shape[-2:]
    heads = HEADS[head_dim]
    q, do = random_arrays(cupy, [(1, heads, n_q, head_dim)] * 2, seed)
    k, v = random_arrays(cupy, [(1, heads, n_k, head_dim)] * 2, seed + 1)
    return spec, q, k, v, do


def _forward(spec, q, k, v):
    return lambda: maskattn.attention(q, k, v, spec)


def _forward_backward(spec, q, k, v, do):
    def call():
        out, lse = maskattn.attention(q, k, v, spec, return_lse=True)
        return maskattn.attention_backward(do, q, k, v, out, lse, spec)

    return call


class _Timed:
    """One call per sample, synchronised: the shortest calls take about 0.1 ms."""

    params = [list(WORKLOADS), SIZES, HEAD_DIMS]
    param_names = ["workload", "n", "head_dim"]
    number = 1
    repeat = (5, 20, 0.5)  # at least 5 samples, at most 20 or 0.5 s
    rounds = 1
    warmup_time = 0.05
    timeout = 300

    def _prepare(self, call):
        self.cupy = cupy_or_skip()
        self.call = call
        for _ in range(2):  # plan compile and upload, kernel builds, the prepared call
            call()
        synchronize(self.cupy)


class Forward(_Timed):
    def setup(self, name, n, head_dim):
        spec, q, k, v, _ = _case(name, n, head_dim)
        self._prepare(_forward(spec, q, k, v))

    def time_forward(self, name, n, head_dim):
        self.call()
        synchronize(self.cupy)


class ForwardBackward(_Timed):
    def setup(self, name, n, head_dim):
        self._prepare(_forward_backward(*_case(name, n, head_dim)))

    def time_forward_backward(self, name, n, head_dim):
        self.call()
        synchronize(self.cupy)


def measure_rates(self):
    """setup_cache of the ``Rates`` classes (one function, so they share one cache and one process):
    {(workload, n, head_dim): {"fwd_ms", "fwd_bwd_ms", "fwd_flops"} or why the case did not run, "kernels": the kernel
    modules the process built}; without a GPU, {"skip": why}."""
    try:
        cupy = cupy_or_skip()
    except NotImplementedError as err:
        return {"skip": str(err)}
    table = {}
    for head_dim in HEAD_DIMS:
        for n in SIZES:
            for name in WORKLOADS:
                try:
                    spec, q, k, v, do = _case(name, n, head_dim)
                except NotImplementedError as err:
                    table[name, n, head_dim] = str(err)
                    continue
                try:
                    plan = maskattn.compile_mask(spec, TILE)
                    table[name, n, head_dim] = {
                        "fwd_ms": gpu_ms(cupy, _forward(spec, q, k, v)),
                        "fwd_bwd_ms": gpu_ms(cupy, _forward_backward(spec, q, k, v, do)),
                        "fwd_flops": q.shape[0] * q.shape[1] * plan.stats(head_dim)["fwd_flops"],
                    }
                except Exception as err:  # one case failing on an old commit must not lose the others
                    table[name, n, head_dim] = f"{type(err).__name__}: {err}"
                del spec, q, k, v, do
                cupy.get_default_memory_pool().free_all_blocks()
    table["kernels"] = kernels_built()
    return table


measure_rates.timeout = 900


class Rates:
    params = [list(WORKLOADS), SIZES, HEAD_DIMS]
    param_names = ["workload", "n", "head_dim"]
    setup_cache = measure_rates

    def setup(self, table, name, n, head_dim):
        row = table.get("skip") or table[name, n, head_dim]
        if not isinstance(row, dict):
            raise NotImplementedError(row)

    def track_forward_tflops(self, table, name, n, head_dim):
        row = table[name, n, head_dim]
        return row["fwd_flops"] / row["fwd_ms"] / 1e9

    track_forward_tflops.unit = "TFLOP/s"

    def track_forward_backward_tflops(self, table, name, n, head_dim):
        row = table[name, n, head_dim]
        return (1 + BACKWARD_FLOPS) * row["fwd_flops"] / row["fwd_bwd_ms"] / 1e9

    track_forward_backward_tflops.unit = "TFLOP/s"


class RatesKernels:
    """Kernel modules the ``Rates`` process built for all its cases: each one NVRTC build (CuPy's may be hits in its
    on-disk cache)."""

    setup_cache = measure_rates

    def setup(self, table):
        if "skip" in table:
            raise NotImplementedError(table["skip"])

    def track_kernels_built(self, table):
        return table["kernels"]

    track_kernels_built.unit = "modules"
