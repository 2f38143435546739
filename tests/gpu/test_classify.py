"""The GPU dense-mask classifier gives exactly the host compiler's plan, without the mask leaving the device."""

import numpy as np
import pytest

from families import require_gpu

cupy = require_gpu()

import maskattn  # noqa: E402
from maskattn import masks  # noqa: E402
from maskattn.bench import workloads  # noqa: E402


def random_mask(rng, shape, density, blocky):
    mask = rng.random(shape) < density
    if blocky:  # FULL tiles and repeated PARTIAL tiles
        mask = np.repeat(np.repeat(mask[..., ::16, ::16], 16, axis=-2), 16, axis=-1)[..., : shape[-2], : shape[-1]]
    return np.ascontiguousarray(mask)


@pytest.mark.parametrize("tile", [(128, 128), (128, 64), (64, 48), (16, 16), (48, 80)])
@pytest.mark.parametrize("shape,density,blocky", [
    ((1, 1, 1000, 1537), 0.3, False), ((2, 3, 333, 257), 0.05, True), ((1, 1, 517, 517), 0.9, True),
    ((1, 2, 64, 64), 0.0, False), ((1, 1, 300, 200), 1.0, False),
])
def test_device_plan_equals_host_plan(tile, shape, density, blocky):
    rng = np.random.default_rng(sum(shape) + tile[0])
    host = random_mask(rng, shape, density, blocky)
    device_spec = masks.from_dense(cupy.asarray(host))
    assert device_spec.on_device
    a = maskattn.compile_mask(masks.from_dense(host), tile)
    b = maskattn.compile_mask(device_spec, tile)
    for name in ("row_ptr", "col_idx", "kind", "payload_idx", "col_ptr", "row_idx", "bwd_kind", "bwd_payload_idx",
                 "bit_pool"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_workload_mask_on_device():
    spec = workloads.build("doc_prefix", 4096, seed=3)
    dense = spec.to_dense()
    plan = maskattn.compile_mask(masks.from_dense(cupy.asarray(dense)), (128, 128))
    assert plan.equals(maskattn.compile_mask(masks.from_dense(dense), (128, 128)))
    assert np.array_equal(plan.to_dense(), dense)


def test_torch_cuda_mask_stays_on_device():
    torch = pytest.importorskip("torch")
    mask = torch.rand(1, 1, 700, 900, device="cuda") < 0.2
    spec = masks.from_dense(mask)
    assert spec.on_device and spec.mask.data.ptr == mask.data_ptr()
    assert maskattn.compile_mask(spec, (64, 64)).equals(maskattn.compile_mask(masks.from_dense(mask.cpu().numpy()), (64, 64)))
