"""Dense masks that live on a GPU are planned there, end to end (gpu/dense_plan.cu): the kernels write what their NumPy
twin (plans.plan_reference) writes, the plan encodes the host compiler's plan of the same mask exactly (every family,
random densities, odd shapes, batched masks with broadcast and strided dimensions), and attention over it gives a
float64 reference's result, bit for bit the same as over the host plan."""

import numpy as np
import pytest

from families import FAMILIES, check_forward, device_input, dtype_of, poisoned, reference_forward, require_gpu

cupy = require_gpu()

import maskattn  # noqa: E402
from maskattn import masks  # noqa: E402
from maskattn.backends import cuda  # noqa: E402
from maskattn.backends.cuda import plans  # noqa: E402
from maskattn.bench import workloads  # noqa: E402
from maskattn.plan import PARTIAL  # noqa: E402

ENTRY_ARRAYS = ("col_idx", "kind", "payload_idx", "row_idx", "bwd_kind", "bwd_payload_idx")


def check_device_plan(mask, tile):
    """mask: a 4-d CuPy bool array (any strides). Returns the device plan, after checking it three ways."""
    host_mask = cupy.asnumpy(mask)
    plan = plans.dense_plan(mask, tile)
    assert not plan.on_host and plan.payload == "bits"
    layout = plans.dense_layout(plan.groups, *mask.shape[2:], plan.tile)[0]
    got = plans._views(cupy.asnumpy(cuda.device_plan(plan).buffer), layout)
    want = plans._views(plans.plan_reference(host_mask, tile), layout)
    nnz = int(want["row_ptr"][-1, -1])
    for name, a in want.items():  # where the kernels write: entries up to the count, pool slots of PARTIAL tiles
        if name in ENTRY_ARRAYS:
            a, b = a[:nnz], got[name][:nnz]
        elif name == "bit_pool":
            a, b = a[want["tile_kind"] == PARTIAL], got[name][want["tile_kind"] == PARTIAL]
        else:
            b = got[name]
        assert np.array_equal(a, b), f"{name} differs from the twin's"
    host = maskattn.compile_mask(masks.from_dense(host_mask), tile)
    assert plan.equals(host) and plan.on_host  # read back on first use
    assert np.array_equal(plan.to_dense(), host_mask)
    for name in ("m_order", "n_order"):
        assert np.array_equal(getattr(plan, name), getattr(host, name)), name
    return plan


@pytest.mark.parametrize("tile", [(128, 128), (48, 80)], ids=str)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family(family, tile, rng):
    spec = FAMILIES[family](rng)
    dense = spec.to_dense()
    if spec.perm is not None:  # a GPU mask is planned in the order it comes in
        dense = dense[..., spec.perm, :][..., spec.perm]
    check_device_plan(cupy.asarray(dense), tile)


@pytest.mark.parametrize("tile", [(128, 128), (16, 16), (256, 32)], ids=str)
@pytest.mark.parametrize("shape, density", [
    ((1, 1, 1000, 1537), 0.3), ((2, 3, 333, 257), 0.05), ((1, 1, 517, 517), 0.97), ((1, 2, 64, 64), 0.0),
    ((1, 1, 300, 200), 1.0), ((2, 1, 4096, 1024), 0.001), ((1, 4, 129, 4000), 0.5),
])
def test_random_masks(shape, density, tile, rng):
    check_device_plan(cupy.asarray(rng.random(shape) < density), tile)


def test_broadcast_and_strided_masks(rng):
    """Masks as SDPA users hold them: broadcast rows (key padding), broadcast keys, transposed, sliced, offset."""
    tile = (128, 128)
    padding = cupy.asarray(rng.random((3, 1, 1, 700)) < 0.8)
    check_device_plan(cupy.broadcast_to(padding, (3, 1, 600, 700)), tile)
    check_device_plan(cupy.broadcast_to(cupy.asarray(rng.random((1, 2, 600, 1)) < 0.5), (1, 2, 600, 700)), tile)
    square = cupy.asarray(rng.random((1, 1, 640, 640)) < 0.1)
    check_device_plan(square.transpose(0, 1, 3, 2), tile)
    check_device_plan(square[:, :, 3:500, 16:600], tile)  # rows aligned, columns offset by 16
    check_device_plan(square[:, :, 1:, 5:], tile)  # unaligned rows: the bytewise path
    check_device_plan(square[:, :, ::2, ::3], tile)


def test_workload_at_training_size():
    spec = workloads.build("doc_prefix", 4096, seed=3)
    check_device_plan(cupy.asarray(spec.to_dense()), (128, 128))


@pytest.mark.parametrize("dtype_name, head_dim", [("bfloat16", 128), ("float16", 64)])
def test_attention_over_a_device_plan(dtype_name, head_dim, rng):
    """Forward against float64; forward and backward bit for bit those over the host plan of the same mask (the
    kernels read the same tiles; only the pool's slots differ) at one split: by default the device plan's longest
    row is taken as n_nblocks (it is not read back), so few CTAs may split differently."""
    dtype = dtype_of(dtype_name)
    dense = FAMILIES["dense_random"](rng).to_dense()[:, :2]
    tile = cuda.tile_for(head_dim, dtype)
    device = plans.dense_plan(cupy.asarray(dense), tile)
    host = maskattn.compile_mask(masks.from_dense(dense), tile)
    B, H, n_q, n_k = 1, 2, *dense.shape[2:]
    (q64, q), (k64, k), (v64, v) = (device_input(rng, (B, H, n, head_dim), dtype, "bhnd") for n in (n_q, n_k, n_k))
    scale = head_dim ** -0.5
    out = poisoned(q.shape, dtype, "bhnd")
    _, lse = cuda.forward(q, k, v, device, scale, out=out)
    check_forward(out, lse, *reference_forward(q64, k64, v64, dense, scale), dtype_name)
    out, lse = cuda.forward(q, k, v, device, scale, num_splits=1)
    out_host, lse_host = cuda.forward(q, k, v, host, scale, num_splits=1)
    assert cupy.array_equal(out.view(cupy.uint16), out_host.view(cupy.uint16)) and cupy.array_equal(lse, lse_host)
    do = cupy.asarray(rng.standard_normal(q.shape).astype(dtype))
    grads = cuda.backward(do, q, k, v, out, lse, device, scale)
    want = cuda.backward(do, q, k, v, out, lse, host, scale)
    for name, a, b in zip(("dq", "dk", "dv"), grads, want):
        assert cupy.array_equal(a.view(cupy.uint16), b.view(cupy.uint16)), name
    assert not device.on_host  # nothing above read the plan back


def test_torch_cuda_mask_stays_on_device():
    torch = pytest.importorskip("torch")
    mask = torch.rand(1, 1, 700, 900, device="cuda") < 0.2
    spec = masks.from_dense(mask)
    assert spec.on_device and spec.mask.data.ptr == mask.data_ptr()
    plan = maskattn.compile_mask(spec, (64, 64))
    assert not plan.on_host and plan.equals(maskattn.compile_mask(masks.from_dense(mask.cpu().numpy()), (64, 64)))
