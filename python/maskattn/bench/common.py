"""What every benchmark mode shares: timing on the host and on the GPU (``do_bench``'s median, replays in a CUDA graph
over enough input sets to leave L2), the copy bandwidth, and table formatting."""

from __future__ import annotations

import statistics
import time

PEAK_TFLOPS = 790.0  # measured dense bf16 matrix rate of an H100 80GB HBM3 (WORKLOADS.md)
DEFAULT_N, DEFAULT_HEADS, DEFAULT_HEAD_DIM = [8192, 16384], 16, 128  # the GPU modes' shapes; --cpu has its own


def median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def bench_ms(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


TURNS_SAMPLES = 25  # turns_ms: samples of each callable
L2_FLUSH_BYTES = 256 * 2**20  # as do_bench's


def in_turns(names: list, rounds: int):
    """The names round after round, the first of each round rotating: samples taken so share the GPU's clock, which
    falls as the card nears its power limit and recovers when it idles. One after another, an H200 read maskattn's
    causal forward at D = 128, n = 16384 at 0.94x FlashAttention-4's time, in turns 1.05x (docs/performance.md,
    2026-11-28 (h))."""
    for r in range(rounds):
        yield from names[r % len(names):] + names[:r % len(names)]


def turns_ms(fns: dict) -> dict:
    """Milliseconds per call of each callable of ``fns`` ({name: fn}): after three warm-up calls each, TURNS_SAMPLES
    samples each, :func:`in_turns`, each a call after an L2 flush between two CUDA events, as ``do_bench`` takes its
    samples; the median of each's samples. Nothing synchronises between samples, so the host queues calls ahead while
    the GPU works through the round's longer ones: a side's launch time shows only where the host falls behind
    (FlexAttention's FLASH sliding window at 16k read 0.28 ms here, 0.51 ms under ``do_bench`` alone, where its
    launches outlast its kernels)."""
    import torch

    for fn in fns.values():
        for _ in range(3):
            fn()
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    events = {name: [] for name in fns}
    for name in in_turns(list(fns), TURNS_SAMPLES):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.zero_()
        start.record()
        fns[name]()
        stop.record()
        events[name].append((start, stop))
    torch.cuda.synchronize()
    return {name: statistics.median(start.elapsed_time(stop) for start, stop in pairs)
            for name, pairs in events.items()}


GRAPH_CALLS = 20  # calls captured in one CUDA graph
GRAPH_REPLAYS = 15  # timed replays of each graph; the median is kept


def graphs_ms(sides: dict) -> dict:
    """Milliseconds per call inside CUDA graphs, of each side of ``sides`` ({name: callables, one per input set}):
    each side's GRAPH_CALLS calls captured back to back in a torch.cuda.CUDAGraph of its own, taking its callables in
    turn, after a warm-up on a side stream; then GRAPH_REPLAYS replays of each, :func:`in_turns`, each timed with
    events; the median of each's. Nothing runs on the host between kernels, and nothing flushes L2 between calls:
    give enough input sets that they do not fit in L2 together (:func:`input_sets`)."""
    import torch

    graphs = {}
    for name, fns in sides.items():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for fn in fns:
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graphs[name] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[name]):
            for i in range(GRAPH_CALLS):
                fns[i % len(fns)]()
        graphs[name].replay()
    times = {name: [] for name in sides}
    for name in in_turns(list(sides), GRAPH_REPLAYS):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graphs[name].replay()
        stop.record()
        stop.synchronize()
        times[name].append(start.elapsed_time(stop) / GRAPH_CALLS)
    del graphs
    return {name: statistics.median(samples) for name, samples in times.items()}


def timed_in_turns(sides: dict, graph: bool = False) -> tuple[dict, dict]:
    """Every side of ``sides`` ({name: call, or with ``graph`` the calls of every input set}) timed together, in
    turns (:func:`turns_ms`, or :func:`graphs_ms` in CUDA graphs): ``({name: ms}, {name: reason})``. Where that fails,
    each side is tried alone to find the failing ones, whose reasons are kept, and the rest are timed in turns again
    (one peer failing must not hide the others' times)."""
    timer = graphs_ms if graph else turns_ms
    times, why = attempt(lambda: timer(sides)) if sides else ({}, None)
    if why is None:
        return times, {}
    reasons = {}
    for name, side in sides.items():
        _, reason = attempt(lambda: timer({name: side}))
        if reason is not None:
            reasons[name] = reason
    working = {name: side for name, side in sides.items() if name not in reasons}
    times, why = attempt(lambda: timer(working)) if working else ({}, None)
    if why is not None:
        return {}, {**reasons, **{name: why for name in working}}
    return times, reasons


def graph_ms(fns) -> float:
    """:func:`graphs_ms` of one side (its callables ``fns``)."""
    return graphs_ms({"": fns})[""]


def input_sets(nbytes: int) -> int:
    """How many input sets of ``nbytes`` each a graph replay must rotate through so that together they take at least
    twice the device's L2 (one set when a set alone does: each call then reads its inputs from device memory)."""
    import torch

    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return max(1, -(-2 * l2 // nbytes))


def short_reason(err: BaseException, limit: int = 200) -> str:
    """``Type: first line`` of the innermost exception that has a message, following ``raise ... from`` and the
    ``inner_exception`` of torch.compile's wrappers (BackendCompilerFailed, InductorError), whose own first line may
    say only that the backend raised."""
    chain = [err]
    while len(chain) < 16:
        inner = chain[-1].__cause__ or getattr(chain[-1], "inner_exception", None)
        if not isinstance(inner, BaseException):
            break
        chain.append(inner)
    for inner in reversed(chain):
        line = next((s.strip() for s in str(inner).splitlines() if s.strip()), "")
        if line:
            text = f"{type(inner).__name__}: {line}"
            return text if len(text) <= limit else text[:limit - 3] + "..."
    return type(err).__name__


def attempt(fn):
    """``(fn(), None)``, or ``(None, short_reason)`` where ``fn`` raises: one peer failing must not hide the others."""
    try:
        return fn(), None
    except Exception as err:
        return None, short_reason(err)


def try_(fn, errors, label):
    value, reason = attempt(fn)
    if reason is not None:
        errors.append(f"{label}: {reason}")
    return value


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written, on 1 GiB buffers."""
    import torch

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / (bench_ms(lambda: dst.copy_(src)) * 1e6)


def ratio(a, b):
    return None if a is None or b is None else a / b


def fwd_bwd_step(attn, q, k, v, do):
    """One forward+backward of ``attn(q, k, v)`` through autograd, gradients dropped before each call."""
    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))

    def step():
        qg.grad = kg.grad = vg.grad = None
        attn(qg, kg, vg).backward(do)

    return step


def print_report(line: str, errors) -> None:
    """A row's line of the live report, then its errors, one an indented line (flushed: runs are long)."""
    print(line, flush=True)
    for err in errors:
        print(f"    ! {err}", flush=True)


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)
