"""maskattn.torch.scaled_dot_product_attention against torch's SDPA on CPU tensors (the exact reference backend):
argument handling (mask broadcasts, GQA, is_causal, shapes), gradients, fully masked rows, errors, and
torch.compile(fullgraph=True) without recompiles when the mask's contents change. The GPU path is tested in
tests/gpu/test_sdpa_gpu.py."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="maskattn.torch needs torch (pip install 'maskattn[torch]')")

import torch.nn.functional as F  # noqa: E402

import maskattn  # noqa: E402
from test_torch import counting_backend  # noqa: E402

sdpa = maskattn.torch.scaled_dot_product_attention


def inputs(q_shape, kv_shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, dtype=torch.float64, requires_grad=True)
            for shape in (q_shape, kv_shape, kv_shape)]


def check_against_sdpa(q, k, v, **kwargs):
    """Output and gradients (for a random output gradient) equal torch's SDPA to float64 rounding."""
    out = sdpa(q, k, v, **kwargs)
    ref = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    do = torch.randn_like(ref)
    grads = torch.autograd.grad(out, (q, k, v), do)
    want = torch.autograd.grad(ref, (q, k, v), do)
    for name, got, exp in zip("qkv", grads, want):
        torch.testing.assert_close(got, exp, rtol=1e-10, atol=1e-12, msg=lambda m: f"d{name}: {m}")
    return out


B, H, L, S, E = 2, 4, 37, 53, 16
MASK_SHAPES = {  # every way SDPA broadcasts a boolean mask over (B, H, L, S)
    "L,S": (L, S), "1,1,L,S": (1, 1, L, S), "B,1,L,S": (B, 1, L, S), "1,H,L,S": (1, H, L, S),
    "B,H,L,S": (B, H, L, S), "H,L,S": (H, L, S), "B,1,1,S (key padding)": (B, 1, 1, S), "1,1,L,1": (1, 1, L, 1),
}


@pytest.mark.parametrize("shape", list(MASK_SHAPES.values()), ids=list(MASK_SHAPES))
def test_mask_broadcasts(shape):
    q, k, v = inputs((B, H, L, E), (B, H, S, E))
    mask = torch.rand(shape, generator=torch.Generator().manual_seed(1)) < 0.4
    check_against_sdpa(q, k, v, attn_mask=mask)


def test_expanded_mask_is_planned_once():
    """A mask expanded over batch and heads (stride 0) is one mask group, not B * H of them."""
    mask = torch.rand(L, S) < 0.4
    expanded = mask.expand(B, H, L, S)
    assert maskattn.torch._sdpa_mask_4d(expanded, (B, H, L, S)).shape == (1, 1, L, S)
    q, k, v = inputs((B, H, L, E), (B, H, S, E))
    check_against_sdpa(q, k, v, attn_mask=expanded)


@pytest.mark.parametrize("L_, S_", [(37, 37), (20, 53), (53, 20)])
def test_is_causal_aligns_top_left(L_, S_):
    q, k, v = inputs((B, H, L_, E), (B, H, S_, E))
    check_against_sdpa(q, k, v, is_causal=True)


def test_gqa_mqa_batch_broadcast_and_unbatched():
    q, k, v = inputs((B, H, L, E), (B, 2, S, E))
    check_against_sdpa(q, k, v, attn_mask=torch.rand(B, 1, L, S) < 0.5, enable_gqa=True)
    q, k, v = inputs((B, H, L, E), (B, 1, S, E))  # one KV head broadcasts without enable_gqa, as in SDPA
    check_against_sdpa(q, k, v, is_causal=True)
    q, k, v = inputs((B, H, L, E), (1, H, S, E))  # a batch of 1 broadcasts
    check_against_sdpa(q, k, v, attn_mask=torch.rand(L, S) < 0.5)
    q, k, v = inputs((H, L, E), (H, S, E))
    check_against_sdpa(q, k, v, attn_mask=torch.rand(H, L, S) < 0.5, scale=0.3)


def test_fully_masked_rows_give_zero_as_sdpa():
    """torch's SDPA gives 0 (and zero gradients) for a row whose mask is all False; so does maskattn."""
    q, k, v = inputs((1, 2, 8, E), (1, 2, 11, E))
    mask = torch.rand(1, 2, 8, 11) < 0.5
    mask[0, 0, 3] = False
    mask[0, 1, :] = False
    out = check_against_sdpa(q, k, v, attn_mask=mask)
    assert torch.all(out[0, 0, 3] == 0) and torch.all(out[0, 1] == 0)
    (dq,) = torch.autograd.grad(sdpa(q, k, v, attn_mask=mask).sum(), (q,))
    assert torch.all(dq[0, 0, 3] == 0)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"attn_mask": torch.zeros(L, S)}, TypeError, "attn_mask has dtype torch.float32; maskattn supports boolean"),
    ({"attn_mask": torch.ones(L, S, dtype=torch.int32)}, TypeError, "attn_mask has dtype torch.int32"),
    ({"dropout_p": 0.1}, ValueError, r"dropout_p=0.1: maskattn has no dropout"),
    ({"attn_mask": torch.ones(L, S, dtype=torch.bool), "is_causal": True}, ValueError, "both set"),
    ({"attn_mask": torch.ones(3, L, S, dtype=torch.bool)}, ValueError, r"does not broadcast to \(B, H, L, S\)"),
    ({"attn_mask": torch.ones(S, dtype=torch.bool)}, ValueError, "2 to 4 dimensions"),
])
def test_errors_name_what_is_supported(kwargs, error, match):
    q, k, v = inputs((B, H, L, E), (B, H, S, E))
    with pytest.raises(error, match=match):
        sdpa(q, k, v, **kwargs)


def test_shape_errors():
    q, k, v = inputs((B, H, L, E), (B, 2, S, E))
    with pytest.raises(ValueError, match="pass enable_gqa=True"):
        sdpa(q, k, v)
    q, k, v = inputs((B, H, L, E), (B, 3, S, E))
    with pytest.raises(ValueError, match="multiple of the key heads"):
        sdpa(q, k, v, enable_gqa=True)
    q, k, v = inputs((B, H, L, E), (B, H, S, E))
    with pytest.raises(ValueError, match="share their last dimension"):
        sdpa(q, k, v[..., :8])
    with pytest.raises(ValueError, match=r"\(B, H, L, E\) or \(H, L, E\)"):
        sdpa(q[None], k[None], v[None])
    q, k, v = inputs((3, H, L, E), (2, H, S, E))
    with pytest.raises(ValueError, match="batch 3 and key 2"):
        sdpa(q, k, v)


def test_opcheck():
    q, k, v = inputs((1, 2, 20, 8), (1, 2, 30, 8))
    mask = torch.rand(1, 1, 20, 30) < 0.5
    for attn_mask, causal in ((mask, False), (None, True), (None, False)):
        torch.library.opcheck(torch.ops.maskattn.sdpa.default, (q, k, v, attn_mask, causal, 0.4))
    out, lse, plan = torch.ops.maskattn.sdpa(q, k, v, mask, False, 0.4)
    assert plan.dtype == torch.uint8 and plan.numel() == 0  # plans travel from forward to backward on the GPU only
    torch.library.opcheck(torch.ops.maskattn.sdpa_backward.default,
                          (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(), mask,
                           plan, False, 0.4))


def test_compile_fullgraph_does_not_recompile_when_the_mask_changes():
    q, k, v = inputs((1, 4, 40, 8), (1, 2, 40, 8))
    graphs = []

    @torch.compile(fullgraph=True, backend=counting_backend(graphs))
    def loss(q, k, v, mask):
        return (sdpa(q, k, v, attn_mask=mask, enable_gqa=True) ** 2).sum()

    rng = np.random.default_rng(0)
    for density in (0.1, 0.5, 0.9):
        mask = torch.from_numpy(rng.random((1, 1, 40, 40)) < density)
        q.grad = None
        value = loss(q, k, v, mask)
        value.backward()
        eager = (F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True) ** 2).sum()
        (grad,) = torch.autograd.grad(eager, q)
        torch.testing.assert_close(value, eager)
        torch.testing.assert_close(q.grad, grad)
    assert len(graphs) == 1
