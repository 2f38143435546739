"""maskattn.torch on CPU tensors (the exact reference backend): the custom op's autograd, fake implementation
and torch.compile behaviour. The CUDA path is tested in tests/gpu."""

import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="maskattn.torch needs torch (pip install 'maskattn[torch]')")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import maskattn  # noqa: E402
from maskattn import masks  # noqa: E402
from maskattn.testing import dense_softmax_attention  # noqa: E402


def tensors(B=1, H=4, Hk=2, n_q=40, n_k=40, D=8, seed=0, layout="bhnd"):
    g = torch.Generator().manual_seed(seed)
    shape = lambda h, n: (B, h, n, D) if layout == "bhnd" else (B, n, h, D)  # noqa: E731
    return [torch.randn(shape(h, n), generator=g, dtype=torch.float64, requires_grad=True)
            for h, n in ((H, n_q), (Hk, n_k), (Hk, n_k))]


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_gradcheck_with_gqa_and_padding(layout):
    q, k, v = tensors(layout=layout)
    spec = masks.document([10, 20], n=40)
    assert torch.autograd.gradcheck(lambda a, b, c: maskattn.torch.attention(a, b, c, spec, layout=layout), (q, k, v))


def test_forward_matches_dense_softmax_and_returns_torch():
    q, k, v = tensors(n_q=30, n_k=50)
    spec = masks.causal(30, 50)
    out = maskattn.torch.attention(q, k, v, spec, scale=0.2)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64 and out.requires_grad
    ref = dense_softmax_attention(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), spec.to_dense(), 0.2)
    np.testing.assert_allclose(out.detach().numpy(), ref, atol=1e-12)


def test_opcheck():
    q, k, v = tensors()
    handle = maskattn.torch.mask_handle(masks.sliding_window(40, left=7))
    torch.library.opcheck(torch.ops.maskattn.attention.default, (q, k, v, handle, 0.35, "bhnd"))
    out, lse = torch.ops.maskattn.attention(q, k, v, handle, 0.35, "bhnd")
    torch.library.opcheck(torch.ops.maskattn.attention_backward.default,
                          (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(),
                           handle, 0.35, "bhnd"))


def counting_backend(graphs):
    """A torch.compile backend that runs the graphs it gets through AOTAutograd (so custom ops' fake and autograd
    registrations are exercised) and appends each to ``graphs``: one entry per compile."""

    def backend(gm, example_inputs):
        graphs.append(gm)
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(fw_compiler=lambda g, _: make_boxed_func(g.forward))(gm, example_inputs)

    return backend


def test_compile_fullgraph_does_not_recompile_for_a_new_mask():
    q, k, v = tensors()
    graphs = []

    @torch.compile(fullgraph=True, backend=counting_backend(graphs))
    def loss(q, k, v, mask):
        return (maskattn.torch.attention(q, k, v, mask) ** 2).sum()

    for spec in (masks.causal(40), masks.document([25, 15]), masks.sliding_window(40, left=3)):
        q.grad = None
        value = loss(q, k, v, maskattn.torch.mask_handle(spec))
        value.backward()
        eager = (maskattn.torch.attention(q, k, v, spec) ** 2).sum()
        (grad,) = torch.autograd.grad(eager, q)
        assert torch.allclose(value, eager) and torch.allclose(q.grad, grad)
    assert len(graphs) == 1


def test_handles():
    spec = masks.causal(8)
    assert int(maskattn.torch.mask_handle(spec)) == int(maskattn.torch.mask_handle(spec)) > 0
    assert int(maskattn.torch.mask_handle(None)) == 0
    with pytest.raises(TypeError, match="mask must be None"):
        maskattn.torch.mask_handle("causal")
    q, k, v = tensors()
    with pytest.raises(TypeError, match=r"must be a handle .* got torch.bool \(8, 8\); for a boolean mask use "):
        maskattn.torch.attention(q, k, v, torch.ones(8, 8, dtype=torch.bool))
    with pytest.raises(KeyError, match="unknown or expired"):
        maskattn.torch.attention(q, k, v, torch.tensor(10**9))


@pytest.mark.parametrize("deterministic", [False, True])
def test_backward_follows_torch_deterministic_algorithms(deterministic, monkeypatch):
    """The op asks attention_backward for bit-identical gradients exactly when torch's deterministic algorithms are
    on (the GPU kernels differ; the CPU reference is deterministic either way)."""
    seen = []
    backward = maskattn.api.attention_backward

    def spy(*args, **kwargs):
        seen.append(kwargs["deterministic"])
        return backward(*args, **kwargs)

    monkeypatch.setattr(maskattn.api, "attention_backward", spy)
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: deterministic)
    q, k, v = (torch.randn(1, 2, 40, 32, dtype=torch.float64, requires_grad=True) for _ in range(3))
    maskattn.torch.attention(q, k, v, masks.causal(40)).sum().backward()
    assert seen == [deterministic]


class _Passthrough(TorchDispatchMode):
    """A dispatch mode that only records the ops it sees: under one, as under torch.compile, export and fake
    tensors, maskattn.torch calls its custom ops."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("call", ["attention", "sdpa"])
def test_eager_calls_and_traced_calls_agree(call):
    """Eager calls run the ops' functions through an autograd.Function (no custom-op dispatch); traced ones the custom
    ops: the same output and gradients, bit for bit."""
    q, k, v = tensors(Hk=4, n_q=40, n_k=40)
    dense = torch.rand(40, 40, generator=torch.Generator().manual_seed(1)) < 0.3
    if call == "attention":
        run = lambda: maskattn.torch.attention(q, k, v, masks.from_dense(dense.numpy()), scale=0.3)  # noqa: E731
    else:
        run = lambda: maskattn.torch.scaled_dot_product_attention(q, k, v, attn_mask=dense, scale=0.3)  # noqa: E731
    results = []
    for traced in (False, True):
        mode = _Passthrough() if traced else contextlib.nullcontext()
        with mode:
            out = run()
            grads = torch.autograd.grad((out * out).sum(), (q, k, v))
        name = out.grad_fn.name()
        assert name.startswith("GeneratedBackwardFor_maskattn") if traced else name == f"maskattn_{call}Backward"
        if traced:
            assert f"maskattn.{call}.default" in mode.seen and f"maskattn.{call}_backward.default" in mode.seen
        results.append([out.detach(), *grads])
    for eager, traced in zip(*results):
        assert torch.equal(eager, traced)
