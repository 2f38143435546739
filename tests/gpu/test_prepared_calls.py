"""Repeated maskattn.attention calls: the second call with the same arguments runs the prepared launch (no checks,
no plan lookup), on CuPy arrays and torch tensors, with graph permutations, GQA packing and split-KV; torch calls
run on torch's current stream and can be captured in a CUDA graph. Each result against the float64 reference.

Needs CuPy and a CUDA device (and torch for the torch tests); skipped, with the reason shown, without them.
"""

import numpy as np
import pytest

from families import check_forward, device_input, dtype_of, graph_rcm, reference_forward, require_gpu

cp = require_gpu()

import maskattn  # noqa: E402
from maskattn import api, masks  # noqa: E402
from maskattn.bench import workloads  # noqa: E402


CASES = {  # (spec, B, H, Hk, n_q, n_k, D)
    "graph_rcm": (lambda: graph_rcm(np.random.default_rng(700), 700), 1, 4, 2, 700, 700, 64),
    "causal_gqa": (lambda: masks.causal(300, 900), 2, 8, 2, 300, 900, 128),
    "tree_packed_split": (lambda: masks.medusa_tree(workloads.MC_SIM_7B_63, prefix_len=1936), 2, 4, 2, 64, 2000, 128),
    "decode_packed_split": (lambda: masks.kv_cache(1, [1500, 4000], 4000), 2, 32, 8, 1, 4000, 64),
}


def _check(out, lse, q64, k64, v64, spec, layout, dtype_name):
    ref_out, ref_lse = reference_forward(q64, k64, v64, spec.to_dense(), q64.shape[-1] ** -0.5)
    out = out.transpose(0, 2, 1, 3) if layout == "bnhd" else out
    check_forward(out, lse, ref_out, ref_lse, dtype_name)


def _cupy_inputs(rng, case, dtype, layout):
    _, B, H, Hk, n_q, n_k, D = case
    return [device_input(rng, (B, h, n, D), dtype, layout) for h, n in ((H, n_q), (Hk, n_k), (Hk, n_k))]


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_cupy_second_call_is_prepared_and_exact(name, layout, rng):
    case = CASES[name]
    spec = case[0]()
    dtype = dtype_of("bfloat16")
    calls = []
    for _ in range(2):  # fresh inputs each time: the prepared call must not keep data
        (q64, q), (k64, k), (v64, v) = _cupy_inputs(rng, case, dtype, layout)
        if layout == "bnhd":
            q, k, v = (cp.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))
        out, lse = maskattn.attention(q, k, v, spec, layout=layout, return_lse=True)
        assert type(out) is cp.ndarray and out.shape == q.shape and out.flags.c_contiguous
        _check(out, lse, q64, k64, v64, spec, layout, "bfloat16")
        calls.append(api._CALLS.get(api._call_key((q, k, v), spec, "forward", None, layout, None)))
    assert calls[0] is not None and calls[0] is calls[1]


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("name", ["graph_rcm", "causal_gqa"])
def test_cupy_backward_second_call_is_prepared_and_exact(name, layout, deterministic, rng):
    """attention_backward twice with fresh inputs: the prepared call (graph permutation both ways, GQA) against the
    float64 CPU reference's gradients."""
    case = CASES[name]
    spec = case[0]()
    dtype = dtype_of("bfloat16")
    calls = []
    for _ in range(2):
        inputs = _cupy_inputs(rng, case, dtype, layout)
        (do64, do), = _cupy_inputs(rng, case, dtype, layout)[:1]
        (q64, q), (k64, k), (v64, v) = inputs
        if layout == "bnhd":
            q, k, v, do = (cp.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v, do))
        out, lse = maskattn.attention(q, k, v, spec, layout=layout, return_lse=True)
        grads = maskattn.attention_backward(do, q, k, v, out, lse, spec, layout=layout, deterministic=deterministic)
        out64, lse64 = maskattn.attention(q64, k64, v64, spec, return_lse=True)
        want = maskattn.attention_backward(do64, q64, k64, v64, out64, lse64, spec)
        for got, ref, shape in zip(grads, want, (q.shape, k.shape, k.shape)):
            assert type(got) is cp.ndarray and got.shape == shape
            got = cp.asnumpy(got.view(cp.uint16)).view(dtype).astype(np.float64)
            got = got.transpose(0, 2, 1, 3) if layout == "bnhd" else got
            assert not np.isnan(got).any()
            err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            assert err <= 2e-2, f"relative L2 error {err:.3g}"
        key = api._call_key((do, q, k, v, out, lse), spec, "backward", None, layout, deterministic)
        calls.append(api._CALLS.get(key))
    assert calls[0] is not None and calls[0] is calls[1]


def test_misaligned_pointer_after_a_prepared_call_raises(rng):
    dtype = dtype_of("float16")
    spec = masks.causal(256)
    (_, q), = [device_input(rng, (1, 2, 256, 64), dtype, "bhnd")]
    maskattn.attention(q, q, q, spec)
    shifted = cp.zeros(q.size + 8, dtype=dtype)[1:q.size + 1].reshape(q.shape)  # q's strides, 2 bytes off
    with pytest.raises(ValueError, match="16-byte boundary"):
        maskattn.attention(shifted, shifted, shifted, spec)


# ------------------------------------------------------------------------------------------------ torch

def _torch():
    torch = pytest.importorskip("torch", reason="needs torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


def _torch_inputs(torch, rng, case, layout):
    """bf16 torch tensors in the layout's memory order, and their float64 values in bhnd order."""
    _, B, H, Hk, n_q, n_k, D = case
    inputs = []
    for h, n in ((H, n_q), (Hk, n_k), (Hk, n_k)):
        x64 = rng.standard_normal((B, h, n, D))
        x = torch.tensor(x64, device="cuda").to(torch.bfloat16)
        x64 = x.double().cpu().numpy()
        inputs.append((x64, x.transpose(1, 2).contiguous() if layout == "bnhd" else x))
    return inputs


def _as_cupy(out, lse):
    return cp.from_dlpack(out), cp.from_dlpack(lse)


def _poison_allocator(torch, numel):
    """Leave NaN in the caching allocator's free blocks, so that outputs allocated next start as NaN."""
    blocks = [torch.full((numel,), float("nan"), device="cuda", dtype=torch.float32) for _ in range(4)]
    del blocks


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_torch_calls_on_a_side_stream(name, layout, rng):
    torch = _torch()
    case = CASES[name]
    spec = case[0]()
    stream = torch.cuda.Stream()
    for _ in range(2):
        (q64, q), (k64, k), (v64, v) = _torch_inputs(torch, rng, case, layout)
        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            _poison_allocator(torch, 4 * q.numel())
            # written on this stream just before the call: a call on another stream would read stale values
            torch.cuda._sleep(2_000_000)
            q2 = q * 2
            out, lse = maskattn.attention(q2, k, v, spec, layout=layout, return_lse=True)
            out, lse = out.clone(), lse.clone()
        stream.synchronize()
        assert out.dtype == q.dtype and out.device == q.device and out.shape == q.shape
        _check(*_as_cupy(out, lse), 2 * q64, k64, v64, spec, layout, "bfloat16")


def test_torch_backward_on_a_side_stream(rng, monkeypatch):
    """Gradients of a reordered graph mask through the torch op, computed on a side stream, against the same
    computed on the default stream (the first call prepares, the second runs prepared), with torch's deterministic
    algorithms on, which the op follows."""
    torch = _torch()
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
    case = CASES["graph_rcm"]
    spec = case[0]()
    (_, q), (_, k), (_, v) = _torch_inputs(torch, rng, case, "bhnd")
    do = torch.randn_like(q)

    def grads():
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        maskattn.torch.attention(*leaves, spec).backward(do)
        return [x.grad for x in leaves]

    want = grads()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            torch.cuda._sleep(2_000_000)
            got = grads()
    stream.synchronize()
    for a, b in zip(got, want):
        assert torch.equal(a, b)  # deterministic: bit-identical


@pytest.mark.parametrize("name", ["tree_packed_split", "graph_rcm"])
def test_torch_call_in_a_cuda_graph(name, rng):
    torch = _torch()
    case = CASES[name]
    spec = case[0]()
    (_, q), (_, k), (_, v) = _torch_inputs(torch, rng, case, "bhnd")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (compile, plan upload) outside the capture
        maskattn.attention(q, k, v, spec)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = maskattn.attention(q, k, v, spec, return_lse=True)
    for _ in range(2):  # new values in the captured inputs, then replay
        (q64, q_new), (k64, k_new), (v64, v_new) = _torch_inputs(torch, rng, case, "bhnd")
        q.copy_(q_new), k.copy_(k_new), v.copy_(v_new)
        graph.replay()
        torch.cuda.synchronize()
        _check(*_as_cupy(out, lse), q64, k64, v64, spec, "bhnd", "bfloat16")


def test_torch_decode_with_cache_seqlens_in_a_cuda_graph(rng):
    """One captured decode call serves every step: new K / V values and new cache lengths written into the captured
    tensors, then replay, against the float64 reference of keys j < length."""
    torch = _torch()
    case = (None, 3, 32, 8, 1, 2048, 128)
    (_, q), (_, k), (_, v) = _torch_inputs(torch, rng, case, "bhnd")
    lens = torch.tensor([2048, 700, 1], dtype=torch.int32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (compile, plan upload) outside the capture
        maskattn.attention(q, k, v, cache_seqlens=lens)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = maskattn.attention(q, k, v, cache_seqlens=lens, return_lse=True)
    for lengths in ([5, 2048, 1300], [0, 129, 2047]):
        (q64, q_new), (k64, k_new), (v64, v_new) = _torch_inputs(torch, rng, case, "bhnd")
        q.copy_(q_new), k.copy_(k_new), v.copy_(v_new)
        lens.copy_(torch.tensor(lengths, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        dense = np.arange(2048) < np.array(lengths)[:, None, None, None]
        ref_out, ref_lse = reference_forward(q64, k64, v64, dense, 128 ** -0.5)
        check_forward(*_as_cupy(out, lse), ref_out, ref_lse, "bfloat16")
