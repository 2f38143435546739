"""The CPU kernels (backends.cpu: maskprep/attention_kernels.hpp) held to the exact reference backend: forward and
gradients on every mask family, random masks, odd lengths and head dims, GQA, plans with a node order, key lengths,
and every instruction set built for this CPU; their determinism and knobs; and their memory at n = 16384 (no
n_q x n_k allocation).

float64 results must equal the reference's to float64 rounding; float32 results are judged as the GPU kernels are
(STYLE.md): their error against the float64 reference at most twice the float32 reference's, plus a little."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import maskattn
from maskattn import masks, testing
from maskattn._maskprep import attention as kernels
from maskattn.backends import cpu, reference
from test_reference import BUILDERS, TILES, dense_masks, inputs, random_startend

ISAS = kernels.available_isas()
NAMES = ("out", "lse", "dq", "dk", "dv")


def results(backend, plan, q, k, v, do, scale, **kwargs):
    out, lse = backend.forward(q, k, v, plan, scale, **kwargs)
    return (out, lse, *backend.backward(do, q, k, v, out, lse, plan, scale, **kwargs))


def error(got, want):
    """Relative L2 error over the finite elements (as tests/gpu judge the kernels), against a norm of at least that of
    elements of size 1 (inputs are standard normal: a gradient that is 0 up to rounding, such as dq where a row sees one
    key, is judged by its size, not relative to itself); -inf (rows that see no key) must be where the reference has
    it."""
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite), "infinite elements differ"
    if not finite.any():
        return 0.0
    scale = max(np.linalg.norm(want[finite]), np.sqrt(finite.sum()))
    return float(np.linalg.norm(got[finite] - want[finite]) / scale)


def check(spec, tile, *, B=1, H=2, Hk=1, D=8, dtype=np.float64, seed=0, isa=None, threads=2, plan=None):
    """The CPU kernels against the float64 reference on ``spec`` (or ``plan``), forward and backward."""
    rng = np.random.default_rng(seed)
    plan = maskattn.compile_mask(spec, tile) if plan is None else plan
    B, H = max(B, plan.shape[0]), max(H, plan.shape[1])
    q, k, v, do = inputs(rng, B, H, Hk, plan.shape[2], plan.shape[3], D)
    scale = float(rng.uniform(0.2, 1.5))
    want = results(reference, plan, q, k, v, do, scale)
    x = tuple(a.astype(dtype) for a in (q, k, v, do))
    got = results(cpu, plan, *x, scale, threads=threads, isa=isa)
    for name, g, w in zip(NAMES, got, want):
        assert g.dtype == dtype and g.shape == w.shape, name
    if dtype == np.float64:
        for name, g, w in zip(NAMES, got, want):
            assert error(g, w) <= 1e-12, name
    else:
        # rounding only (float64 is held to 1e-12 above): where dP - delta cancels (one query row over 56 keys, D =
        # 40, a saved hypothesis example) float32 dQ differed from float64 by 3.5e-6 against the float32 reference's
        # 1.0e-6, so a few 1e-6 of slack besides twice the reference's error
        same_precision = results(reference, plan, *x, scale)
        for name, g, r, w in zip(NAMES, got, same_precision, want):
            assert error(g, w) <= 2 * error(r, w) + 5e-6, name
    return got


DTYPES = pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])


# ------------------------------------------------------------------------------------------------ mask families


@DTYPES
@pytest.mark.parametrize("tile", [(16, 32), (64, 48)])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_builders(name, tile, dtype):
    check(BUILDERS[name](), tile, B=2, H=4, Hk=1 if name.startswith("document") else 2, dtype=dtype)


@settings(max_examples=40, deadline=None)
@given(spec=dense_masks(), tile=st.sampled_from(TILES), Hk=st.sampled_from([1, 2, 4]),
       dtype=st.sampled_from([np.float32, np.float64]), D=st.sampled_from([1, 5, 16, 40]))
def test_random_dense_masks(spec, tile, Hk, dtype, D):
    check(spec, tile, H=4, Hk=Hk, D=D, dtype=dtype)


@DTYPES
@pytest.mark.parametrize("C, causal", [(1, True), (2, True), (2, False), (4, False)])
def test_interval_masks(C, causal, dtype):
    rng = np.random.default_rng(C * 7 + causal)
    spec = masks.from_intervals(random_startend(rng, 1, 4, 131, 77, C), causal, n_q=131)
    check(spec, (32, 16), H=4, Hk=2, dtype=dtype)


@DTYPES
@pytest.mark.parametrize("reorder", [None, "auto"])
def test_graph_masks(reorder, dtype):
    """Graph masks, in the nodes' order or reordered (a plan with a perm): results in the caller's order."""
    spec = masks.from_graph(testing.random_geometric(300, degree=10, seed=1), reorder=reorder)
    assert (spec.perm is not None) == (reorder == "auto")
    check(spec, (32, 32), H=4, Hk=2, D=24, dtype=dtype)


@pytest.mark.parametrize("isa", ISAS)
@DTYPES
@pytest.mark.parametrize("case", ["causal_odd", "bits", "perm", "wide_tile"])
def test_instruction_sets(case, dtype, isa):
    """Every instruction set built here and run by this CPU, on intervals, bits, a perm and the widest tile."""
    spec, tile = {
        "causal_odd": (masks.causal(97, 203), (48, 80)),
        "bits": (masks.from_dense(np.random.default_rng(3).random((2, 1, 70, 90)) < 0.3), (16, 16)),
        "perm": (masks.longformer(150, 12, global_tokens=2, dilation=3), (16, 32)),
        "wide_tile": (masks.sliding_window(300, left=100), (256, 256)),
    }[case]
    check(spec, tile, B=2, H=4, Hk=2, D=36, dtype=dtype, isa=isa)


@DTYPES
@pytest.mark.parametrize("D", [1, 3, 64, 100, 130])
def test_head_dims(D, dtype):
    check(masks.causal(70), (32, 32), H=2, Hk=1, D=D, dtype=dtype)


def test_large_scores():
    """Scores far from 0 (scale 40): the exp2 range ends and the online rescaling, float32."""
    spec = masks.causal(100)
    got = check(spec, (32, 32), H=2, D=16, dtype=np.float32)
    plan = maskattn.compile_mask(spec, (32, 32))
    q, k, v, do = inputs(np.random.default_rng(9), 1, 2, 1, 100, 100, 16)
    want = results(reference, plan, q, k, v, do, 40.0)
    got = results(cpu, plan, *(x.astype(np.float32) for x in (q, k, v, do)), 40.0)
    for name, g, w in zip(NAMES, got, want):
        assert np.isfinite(g).all(), name
        assert error(g, w) < 1e-3, name


def element_results(plan, q, k, v, do, scale, isa=None, key_lens=None):
    """The kernels with every block of ``plan`` on the element path (its lists made with max_density 1)."""
    lists = kernels.element_lists(plan, 1.0)
    assert lists is not None and lists[0].all() and lists[3].all()
    out, lse = kernels.attention_forward(q, k, v, plan, scale, key_lens, threads=2, isa=isa, lists=lists)
    return (out, lse, *kernels.attention_backward(do, q, k, v, out, lse, plan, scale, threads=3, isa=isa, lists=lists))


@pytest.mark.parametrize("isa", ISAS)
@DTYPES
@pytest.mark.parametrize("D", [24, 64])  # rows packed, rows read where they lie
@pytest.mark.parametrize("name", ["bigbird", "medusa", "function_perm", "random", "graph"])
def test_element_path(name, D, dtype, isa):
    """Bits plans with every query and key block on the element path (rows' keys one by one), against the reference;
    and the lists the backend makes itself where blocks are sparse."""
    rng = np.random.default_rng(4)
    if name == "random":
        spec = masks.from_dense(rng.random((2, 1, 77, 131)) < 0.1)
    elif name == "graph":
        spec = masks.from_graph(testing.random_geometric(200, degree=6, seed=2), reorder="auto")
    else:
        spec = BUILDERS[name]()
    plan = maskattn.compile_mask(spec, (32, 16))
    B = max(2, plan.shape[0])
    q, k, v, do = inputs(rng, B, 4, 2, plan.shape[2], plan.shape[3], D)
    want = results(reference, plan, q, k, v, do, 0.4)
    got = element_results(plan, *(x.astype(dtype) for x in (q, k, v, do)), 0.4, isa=isa)
    for name_, g, w in zip(NAMES, got, want):
        assert error(g, w) <= (1e-12 if dtype == np.float64 else 1e-5), name_
    if name in ("random", "graph"):  # sparse enough for the backend to choose the element path itself
        lists = cpu.element_lists(plan)
        assert lists is not None and lists[0].any() and lists[3].any()
        assert cpu.element_lists(plan) is lists  # made once per plan


@pytest.mark.parametrize("isa", ISAS)
@DTYPES
@pytest.mark.parametrize("D", [24, 64])
def test_element_path_execution_order(D, dtype, isa):
    """A graph in its nodes' given order, every block on the element path: the lists come in an execution order (a
    permutation, not the given one) that the kernels follow like a node order; results as the reference's, and as
    with lists in the plan's order. key_lens takes lists without an order (the backend makes those for it)."""
    rng = np.random.default_rng(5)
    spec = masks.from_graph(testing.random_geometric(300, degree=8, seed=3), reorder=None)
    plan = maskattn.compile_mask(spec, (32, 32))
    assert plan.perm is None
    ordered = kernels.element_lists(plan, 1.0)
    order = ordered[6]
    assert order is not None and np.array_equal(np.sort(order), np.arange(300))
    assert not np.array_equal(order, np.arange(300))
    assert kernels.element_lists(plan, 1.0, ordered=False)[6] is None
    q, k, v, do = (x.astype(dtype) for x in inputs(rng, 2, 4, 2, 300, 300, D))
    want = results(reference, plan, q, k, v, do, 0.4)
    got = element_results(plan, q, k, v, do, 0.4, isa=isa)
    for name, g, w in zip(NAMES, got, want):
        assert error(g, w) <= (1e-12 if dtype == np.float64 else 1e-5), name
    lens = np.array([300, 171])
    with pytest.raises(ValueError, match="execution order"):
        kernels.attention_forward(q, k, v, plan, 0.4, lens, lists=ordered)
    with_lens = cpu.forward(q, k, v, plan, 0.4, key_lens=lens)
    for g, w in zip(with_lens, reference.forward(q, k, v, plan, 0.4, key_lens=lens)):
        assert error(g, w) <= (1e-12 if dtype == np.float64 else 1e-5)


def test_element_path_key_lens():
    rng = np.random.default_rng(8)
    plan = maskattn.compile_mask(masks.from_dense(rng.random((40, 90)) < 0.2), (16, 32))
    q, k, v, do = inputs(rng, 3, 2, 1, 40, 90, 8)
    lens = np.array([0, 33, 90])
    want = reference.forward(q, k, v, plan, 0.5, key_lens=lens)
    got = element_results(plan, q, k, v, do, 0.5, key_lens=lens)[:2]
    for g, w in zip(got, want):
        assert error(g, w) <= 1e-12


# ------------------------------------------------------------------------------------------------ edge cases


def test_fully_masked_rows_and_columns():
    mask = np.tril(np.ones((40, 50), bool), k=10)
    mask[5:21] = False
    mask[:, 30:] = False
    out, lse, dq, dk, dv = check(masks.from_dense(mask), (16, 16), H=2, Hk=1, dtype=np.float32)
    assert np.all(out[:, :, 5:21] == 0) and np.all(lse[:, :, 5:21] == -np.inf) and np.all(dq[:, :, 5:21] == 0)
    assert np.all(dk[:, :, 30:] == 0) and np.all(dv[:, :, 30:] == 0)


def test_empty_plan():
    got = check(masks.from_dense(np.zeros((20, 30), bool)), (16, 16), H=2, Hk=2)
    assert np.all(got[1] == -np.inf) and all(np.all(g == 0) for i, g in enumerate(got) if i != 1)


@DTYPES
def test_key_lens(dtype):
    """cache_seqlens: keys j >= key_lens[b] masked besides the plan, through the API as for the reference."""
    rng = np.random.default_rng(11)
    q, k, v, _ = inputs(rng, 4, 4, 2, 37, 150, 16, dtype)
    lens = np.array([0, 1, 77, 150])
    for spec in (None, masks.causal(37, 150)):
        got = maskattn.attention(q, k, v, spec, cache_seqlens=lens, return_lse=True)
        plan = maskattn.compile_mask(spec or masks.full(37, 150), (32, 32))
        want = reference.forward(*(x.astype(np.float64) for x in (q, k, v)), plan, 0.25, key_lens=lens)
        for g, w in zip(got, want):
            assert error(g, w) < (1e-12 if dtype == np.float64 else 1e-5)
        assert np.all(got[0][0] == 0) and np.all(got[1][0] == -np.inf)


def test_strided_and_copied_inputs():
    """bnhd views through the API, and a last dimension with a stride (copied) equal contiguous inputs."""
    rng = np.random.default_rng(3)
    q, do = (rng.standard_normal((2, 37, 4, 8)) for _ in range(2))
    k, v = (rng.standard_normal((2, 60, 2, 8)) for _ in range(2))
    spec = masks.causal(37, 60)
    out, lse = maskattn.attention(q, k, v, spec, layout="bnhd", return_lse=True)
    grads = maskattn.attention_backward(do, q, k, v, out, lse, spec, layout="bnhd")
    contiguous = [np.ascontiguousarray(x.swapaxes(1, 2)) for x in (q, k, v, do)]
    plan = maskattn.compile_mask(spec, cpu.TILE)
    want = results(reference, plan, *contiguous, 8 ** -0.5)
    for name, g, w in zip(NAMES, (out.swapaxes(1, 2), lse, *(g.swapaxes(1, 2) for g in grads)), want):
        assert error(g, w) <= 1e-12, name
    wide = np.repeat(contiguous[0], 2, axis=-1)[..., ::2]  # last-dimension stride 2
    assert not wide.flags.c_contiguous
    np.testing.assert_array_equal(cpu.forward(wide, *contiguous[1:3], plan, 0.3)[0],
                                  cpu.forward(contiguous[0], *contiguous[1:3], plan, 0.3)[0])


def test_errors():
    q, k, v, _ = inputs(np.random.default_rng(0), 1, 2, 1, 20, 30, 4, np.float32)
    plan = maskattn.compile_mask(masks.causal(20, 31), (16, 16))
    with pytest.raises(ValueError, match="does not fit"):
        cpu.forward(q, k, v, plan, 0.5)
    plan = maskattn.compile_mask(masks.causal(20, 30), (16, 16))
    with pytest.raises(TypeError, match="float64"):
        cpu.forward(q, k.astype(np.float64), v, plan, 0.5)
    with pytest.raises(TypeError, match="float32 or float64"):
        cpu.forward(q.astype(np.float16), k, v, plan, 0.5)
    with pytest.raises(ValueError, match="isa"):
        cpu.forward(q, k, v, plan, 0.5, isa="sse9")


# ------------------------------------------------------------------------------------------------ input check


def with_bad(arrays, name, value):
    """``arrays`` (name: array) with a copy of ``name`` whose last element, in the last row and head, is ``value``."""
    x = arrays[name].copy()
    x[-1, -1, -1, -1] = value
    return {**arrays, name: x}


@pytest.mark.parametrize("isa", ISAS)
@DTYPES
@pytest.mark.parametrize("D", [3, 64])
@pytest.mark.parametrize("case", ["tiles", "elements", "perm"])
def test_non_finite_inputs(case, D, dtype, isa):
    """check_finite: the kernels name an input that holds inf or NaN, forward (q, k, v) and backward (do, q, k, v,
    out), also where no product reads it (the last query row sees no key, the last key no row: the bad element is
    there), on tiles, on the element path and through a node order; the first input in the API's order where several
    do; none without the check."""
    rng = np.random.default_rng(5)
    if case == "perm":
        spec = masks.longformer(150, 12, global_tokens=2, dilation=3)
    else:
        dense = rng.random((70, 90)) < 0.3
        dense[-1], dense[:, -1] = False, False
        spec = masks.from_dense(dense)
    plan = maskattn.compile_mask(spec, (16, 32))
    lists = kernels.element_lists(plan, 1.0) if case == "elements" else None
    q, k, v, do = inputs(rng, 2, 4, 2, plan.shape[2], plan.shape[3], D, dtype)
    options = {"threads": 2, "isa": isa, "lists": lists}

    def forward(x, check=True):
        return kernels.attention_forward(x["q"], x["k"], x["v"], plan, 0.5, **options, check_finite=check)

    def backward(x, check=True):
        return kernels.attention_backward(x["do"], x["q"], x["k"], x["v"], x["out"], lse, plan, 0.5, **options,
                                          check_finite=check)

    clean = {"q": q, "k": k, "v": v}
    out, lse = forward(clean)
    clean.update(do=do, out=out)
    backward(clean)
    for run, names in ((forward, ("q", "k", "v")), (backward, ("do", "q", "k", "v", "out"))):
        for name, value in zip(names, (np.nan, np.inf, -np.inf, np.nan, np.inf)):
            bad = with_bad(clean, name, value)
            with pytest.raises(ValueError, match=f"^{name} holds inf or NaN; attention inputs must be finite"):
                run(bad)
            run(bad, check=False)
        with pytest.raises(ValueError, match=f"^{names[0]} holds"):
            run(with_bad(with_bad(clean, names[0], np.inf), names[-1], np.nan))


@pytest.mark.parametrize("backend", ["fast", "reference"])
def test_non_finite_inputs_through_the_api(backend, monkeypatch):
    """maskattn.attention and attention_backward on NumPy inputs check by default, on either CPU backend."""
    monkeypatch.setenv("MASKATTN_CPU_BACKEND", backend)
    q, k, v, do = inputs(np.random.default_rng(6), 1, 2, 1, 40, 40, 8)
    out, lse = maskattn.attention(q, k, v, masks.causal(40), return_lse=True)
    forward = {"q": q, "k": k, "v": v}
    for name in forward:
        with pytest.raises(ValueError, match=f"^{name} holds inf or NaN"):
            maskattn.attention(**with_bad(forward, name, np.inf), mask=masks.causal(40))
    for name in ("do", "q", "k", "v", "out"):
        arrays = with_bad({**forward, "do": do, "out": out}, name, np.nan)
        with pytest.raises(ValueError, match=f"^{name} holds inf or NaN"):
            maskattn.attention_backward(arrays["do"], arrays["q"], arrays["k"], arrays["v"], arrays["out"], lse,
                                        masks.causal(40))


# ------------------------------------------------------------------------------------------------ threads, choice


def test_deterministic():
    """Forward bits do not depend on the threads; backward bits repeat for given threads, also where (batch, head)s
    are split into key-block ranges (one head, three threads)."""
    spec = masks.document([50, 70, 80])
    plan = maskattn.compile_mask(spec, (32, 32))
    q, k, v, do = (x.astype(np.float32) for x in inputs(np.random.default_rng(2), 1, 1, 1, 200, 200, 16))
    one = results(cpu, plan, q, k, v, do, 0.3, threads=1)
    for threads in (1, 2, 3):
        again = results(cpu, plan, q, k, v, do, 0.3, threads=threads)
        np.testing.assert_array_equal(again[0], one[0])
        np.testing.assert_array_equal(again[1], one[1])
        repeat = results(cpu, plan, q, k, v, do, 0.3, threads=threads)
        for a, b in zip(again, repeat):
            np.testing.assert_array_equal(a, b)
    check(spec, (32, 32), H=1, threads=3, dtype=np.float32)


def test_threads_knobs(monkeypatch):
    monkeypatch.delenv("MASKATTN_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu.threads() == 3
    monkeypatch.setenv("MASKATTN_NUM_THREADS", "5")
    assert cpu.threads() == 5
    monkeypatch.setenv("MASKATTN_NUM_THREADS", "many")
    with pytest.raises(ValueError, match="MASKATTN_NUM_THREADS"):
        cpu.threads()
    monkeypatch.delenv("MASKATTN_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert cpu.threads() >= 1


def test_the_api_chooses(monkeypatch):
    """NumPy inputs run on the CPU kernels; MASKATTN_CPU_BACKEND=reference picks the exact reference."""
    calls = []
    monkeypatch.setattr(reference, "forward", lambda *args, **kwargs: calls.append(args) or (args[0] * 0, None))
    q = np.ones((1, 1, 8, 4))
    maskattn.attention(q, q, q)
    assert not calls
    monkeypatch.setenv("MASKATTN_CPU_BACKEND", "reference")
    maskattn.attention(q, q, q)
    assert len(calls) == 1
    monkeypatch.setenv("MASKATTN_CPU_BACKEND", "fastest")
    with pytest.raises(ValueError, match="MASKATTN_CPU_BACKEND"):
        maskattn.attention(q, q, q)


# ------------------------------------------------------------------------------------------------ memory

MEMORY_PROBE = textwrap.dedent("""
    import numpy as np
    import maskattn
    from maskattn.backends import cpu

    def status(field):  # kB; VmHWM is this address space's peak (ru_maxrss would carry the forking parent's)
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

    n, D = 16384, 16
    rng = np.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((1, 1, n, D), dtype=np.float32) for _ in range(4))
    plan = maskattn.compile_mask(maskattn.masks.causal(n), cpu.TILE)
    resident = status("VmRSS")
    out, lse = cpu.forward(q, k, v, plan, 0.25, threads=2)
    grads = cpu.backward(do, q, k, v, out, lse, plan, 0.25, threads=2)
    print(status("VmHWM") - resident)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status (Linux)")
def test_no_square_allocation():
    """Forward and backward of a causal mask at n = 16384 in a fresh process: the peak resident memory grows by far
    less than one n x n boolean matrix (256 MiB; float32 scores would be 1 GiB)."""
    env = dict(os.environ, MASKATTN_CPU_BACKEND="fast")
    done = subprocess.run([sys.executable, "-c", MEMORY_PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    grown = int(done.stdout.split()[-1])
    assert grown < 64 * 2**20, f"peak memory grew by {grown / 2**20:.0f} MiB"
