"""maskattn with torch CUDA tensors: torch in, torch out without copies, the autograd op against SDPA with
the dense mask, torch.compile(fullgraph=True) with inductor, and Flex block masks on the GPU."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("cupy", reason="the CUDA backend needs CuPy")

import torch.nn.functional as F  # noqa: E402

import maskattn  # noqa: E402
from maskattn import _arrays, masks  # noqa: E402

SPECS = {
    "doc_prefix": lambda n: masks.document([n // 3, n // 2, n - n // 3 - n // 2], prefix=[40, 0, n // 8]),
    "sink_swa": lambda n: masks.sliding_window(n, left=300, sinks=16),
    "bigbird": lambda n: masks.bigbird(n, 64, seed=1),
    "graph_rcm": lambda n: masks.from_graph(_geometric_graph(n), reorder="rcm"),  # q, k, v permuted both ways
}


def _geometric_graph(n):
    pts = np.random.default_rng(n).random((n, 2))
    return np.linalg.norm(pts[:, None] - pts[None], axis=-1) < 0.06


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def qkv(n, dtype, H=8, Hk=2, D=64, requires_grad=False):
    g = torch.Generator(device="cuda").manual_seed(n)
    make = lambda h: torch.randn(2, h, n, D, device="cuda", dtype=dtype, generator=g)  # noqa: E731
    return [x.requires_grad_(requires_grad) for x in (make(H), make(Hk), make(Hk))]


def test_torch_in_torch_out_without_copies():
    q, k, v = qkv(1000, torch.bfloat16)
    views, device, _ = _arrays.ingest(q=q, k=k, v=v)
    assert device == "cuda:0"
    assert [views[n].data.ptr for n in "qkv"] == [x.data_ptr() for x in (q, k, v)]
    out = maskattn.attention(q, k, v, masks.causal(1000))
    assert isinstance(out, torch.Tensor) and out.device == q.device and out.dtype == q.dtype
    assert out.shape == q.shape


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 1e-2)])
def test_gradients_match_sdpa_with_dense_mask(name, dtype, tol):
    n = 1000
    spec = SPECS[name](n)
    q, k, v = qkv(n, dtype, requires_grad=True)
    do = torch.randn_like(q)
    out = maskattn.torch.attention(q, k, v, spec)
    out.backward(do)
    dense = torch.as_tensor(spec.to_dense(), device="cuda")
    q32, k32, v32 = (x.detach().float().requires_grad_() for x in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    ref = F.scaled_dot_product_attention(q32, k32.repeat_interleave(rep, 1), v32.repeat_interleave(rep, 1),
                                         attn_mask=dense)
    ref.backward(do.float())
    assert rel(out, ref) < tol / 2
    for got, want in ((q.grad, q32.grad), (k.grad, k32.grad), (v.grad, v32.grad)):
        assert not torch.isnan(got).any()
        assert rel(got, want) < tol


def test_compile_fullgraph_inductor_no_recompile():
    n = 512
    q, k, v = qkv(n, torch.bfloat16, requires_grad=True)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()

    @torch.compile(fullgraph=True)
    def step(q, k, v, mask):
        return (maskattn.torch.attention(q, k, v, mask).float() ** 2).mean()

    for spec in (SPECS["doc_prefix"](n), SPECS["sink_swa"](n), masks.causal(n)):
        q.grad = None
        loss = step(q, k, v, maskattn.torch.mask_handle(spec))
        loss.backward()
        eager = (maskattn.torch.attention(q, k, v, spec).float() ** 2).mean()
        assert torch.allclose(loss, eager, rtol=1e-3)
    stats = torch._dynamo.utils.counters["stats"]
    assert stats["unique_graphs"] == 1, dict(stats)


def test_to_flex_block_mask_runs_in_flex_attention():
    torch_flex = pytest.importorskip("torch.nn.attention.flex_attention")
    n = 1024
    spec = masks.document([300, 500, 224], prefix=[20, 0, 50])
    plan = maskattn.compile_mask(spec, (128, 128))
    q, k, v = qkv(n, torch.bfloat16, Hk=8)
    got = torch_flex.flex_attention(q, k, v, block_mask=maskattn.flex.to_block_mask(plan))
    want = maskattn.attention(q, k, v, spec)
    assert rel(got, want) < 1e-2
    dense = torch.as_tensor(spec.to_dense()[0, 0], device="cuda")
    block_mask = torch_flex.create_block_mask(lambda b, h, qi, kv: dense[qi, kv], 1, 1, n, n, device="cuda")
    assert np.array_equal(maskattn.flex.from_block_mask(block_mask).to_dense(), spec.to_dense())
