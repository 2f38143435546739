"""maskattn.torch.scaled_dot_product_attention on CUDA tensors against torch's SDPA with the same boolean mask (planned
on the GPU inside the op on every call): forward and gradients on random masks with fully masked rows, broadcasts,
GQA, is_causal; a mask changed in place; a side stream; torch.compile(fullgraph=True) with inductor."""

import zlib

import pytest

torch = pytest.importorskip("torch", reason="needs torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("cupy", reason="the CUDA backend needs CuPy")

import torch.nn.functional as F  # noqa: E402

import maskattn  # noqa: E402

sdpa = maskattn.torch.scaled_dot_product_attention
TOL = {torch.bfloat16: 2e-2, torch.float16: 1e-2}


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def random_mask(g, shape, density=0.3, empty_rows=True):
    """Blocks empty, full or random (FULL, PARTIAL and skipped tiles), plus rows that see nothing."""
    *lead, L, S = shape
    blocks = torch.randint(0, 3, (*lead, -(-L // 128), -(-S // 128)), generator=g, device="cuda")
    blocks = blocks.repeat_interleave(128, -2).repeat_interleave(128, -1)[..., :L, :S]
    mask = (blocks == 1) | ((blocks == 2) & (torch.rand(shape, generator=g, device="cuda") < density))
    if empty_rows and L > 1:
        mask[..., L // 3, :] = False
    return mask


def check(q, k, v, dtype, **kwargs):
    """Forward and gradients against SDPA in float32 on the same 16-bit inputs. Rows that see no key must give 0
    and zero gradients; the reference lets them see every key with a zero output gradient instead, so that its
    result does not depend on what SDPA does there (bench --sdpa reports that)."""
    q, k, v = (x.to(dtype).requires_grad_() for x in (q, k, v))
    do = torch.randn_like(q)
    out = sdpa(q, k, v, **kwargs)
    out.backward(do)
    B, H, L, S = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    mask = kwargs.pop("attn_mask", None)
    seen = torch.ones(B, H, L, dtype=torch.bool, device="cuda") if mask is None else mask.any(-1).expand(B, H, L)
    if mask is not None:
        kwargs["attn_mask"] = mask.expand(B, H, L, S) | ~seen[..., None]
    q32, k32, v32 = (x.detach().float().requires_grad_() for x in (q, k, v))
    ref = F.scaled_dot_product_attention(q32, k32, v32, **kwargs)
    ref.backward(do.float() * seen[..., None])
    assert not torch.isnan(out).any() and torch.all(out[~seen] == 0)
    assert rel(out[seen], ref[seen]) < TOL[dtype] / 2
    for name, got, want in (("dq", q.grad, q32.grad), ("dk", k.grad, k32.grad), ("dv", v.grad, v32.grad)):
        assert not torch.isnan(got).any(), name
        assert rel(got, want) < TOL[dtype], name
    assert torch.all(q.grad[~seen] == 0)


CASES = ["L,S", "B,1,L,S", "B,H,L,S", "B,1,1,S", "gqa", "causal"]


@pytest.mark.parametrize("case, D, dtype", [(case, 128, torch.bfloat16) for case in CASES] +
                         [(case, 64, torch.float16) for case in ("gqa", "B,1,1,S")])
def test_matches_sdpa(case, D, dtype):
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{case} {D}".encode()))
    B, H, L, S = 2, 4, 777, 1000
    Hk = 2 if case == "gqa" else H
    q = torch.randn(B, H, L, D, device="cuda", generator=g)
    k, v = (torch.randn(B, Hk, S, D, device="cuda", generator=g) for _ in range(2))
    shapes = {"L,S": (L, S), "B,1,L,S": (B, 1, L, S), "B,H,L,S": (B, H, L, S), "B,1,1,S": (B, 1, 1, S),
              "gqa": (B, 1, L, S)}
    if case == "causal":
        check(q, k, v, dtype, is_causal=True)
    else:
        mask = random_mask(g, shapes[case], empty_rows=case != "B,1,1,S")
        check(q, k, v, dtype, attn_mask=mask, enable_gqa=case == "gqa")


def test_mask_changed_in_place_and_side_stream():
    """Nothing about the mask is cached between calls: a mask edited in place gives the new result; on a side
    stream the plan is built and read in order with the work that wrote the mask."""
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 4, 1024, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    mask = random_mask(g, (1024, 1024))
    first = sdpa(q, k, v, attn_mask=mask)
    mask.logical_not_()
    mask[:, 0] = True
    second = sdpa(q, k, v, attn_mask=mask)
    assert rel(second, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)) < 1e-2 and rel(first, second) > 0.1
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fresh = torch.rand(1024, 1024, device="cuda", generator=g) < 0.05
        fresh[:, 0] = True
        out = sdpa(q, k, v, attn_mask=fresh)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=fresh)
    torch.cuda.current_stream().wait_stream(side)
    assert rel(out, want) < 1e-2


def test_compile_fullgraph_inductor_new_masks_no_recompile():
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(1, 4, 512, 128, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
               for _ in range(3))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()

    @torch.compile(fullgraph=True)
    def step(q, k, v, mask):
        return (sdpa(q, k, v, attn_mask=mask).float() ** 2).mean()

    for density in (0.05, 0.3, 0.9):
        mask = random_mask(g, (1, 1, 512, 512), density, empty_rows=False)
        q.grad = None
        loss = step(q, k, v, mask)
        loss.backward()
        eager = (F.scaled_dot_product_attention(q, k, v, attn_mask=mask).float() ** 2).mean()
        (grad,) = torch.autograd.grad(eager, q)
        assert torch.allclose(loss, eager, rtol=2e-2) and rel(q.grad, grad) < 2e-2
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_one_prepared_call_per_geometry():
    """Masks of one geometry share a prepared call (its launches' plan pointers move to each call's plan): every result
    follows its own mask, and the cache of prepared calls does not grow."""
    from maskattn import api

    g = torch.Generator(device="cuda").manual_seed(2)
    q = torch.randn(2, 4, 700, 128, device="cuda", generator=g)
    k, v = (torch.randn(2, 4, 900, 128, device="cuda", generator=g) for _ in range(2))
    for i, density in enumerate((0.05, 0.5, 0.9, 0.2)):
        check(q, k, v, torch.bfloat16, attn_mask=random_mask(g, (2, 1, 700, 900), density))
        if i == 0:
            kept = len(api._CALLS)
    assert len(api._CALLS) == kept
