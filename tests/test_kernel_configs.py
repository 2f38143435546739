"""Which CUDA kernel and tile serve each head dim (backends.cuda.kernels), checked on the host: no GPU needed."""

import numpy as np
import pytest
import scipy.sparse as sp

from maskattn import compile_mask, masks
from maskattn.backends.cuda import bwd, kernels
from maskattn.bench import workloads


@pytest.fixture
def hopper(monkeypatch):
    """kernels as on an H100 (compute capability 9.0), the wgmma kernels enabled."""
    monkeypatch.setattr(kernels, "compute_capability", lambda device_id: "90")
    monkeypatch.delenv("MASKATTN_SM90", raising=False)


@pytest.mark.parametrize("head_dim", kernels.HEAD_DIMS)
def test_the_training_tile_takes_the_wgmma_forward_where_it_exists(head_dim, hopper):
    tile = kernels.tile_for(head_dim, np.float16, device=None)
    assert kernels.uses_sm90(head_dim, tile, 0) == (head_dim in kernels.SM90_HEAD_DIMS)
    assert bwd.uses_sm90(head_dim, tile, 0) == (head_dim in kernels.SM90_HEAD_DIMS)
    if head_dim in kernels.SM90_HEAD_DIMS:
        assert tile == (128, kernels.sm90_tile_n(head_dim))
        # the launch with a node order asks for the producers' row tables on top
        assert kernels.sm90_smem_bytes(head_dim) + kernels.ROW_TABLE_BYTES <= kernels.SM90_SMEM_OPTIN
        assert bwd.bwd_sm90_smem_bytes(head_dim) + bwd.dkdv_row_table_bytes(head_dim) <= kernels.SM90_SMEM_OPTIN
        # 80-row steps over runs of query blocks: D = 128 without bit tiles, D = 96 without partial tiles; no node
        # order, float32 dQ
        runs = bwd.sm90_runs(head_dim, "MASK_NONE", False, False)
        assert runs == (head_dim in (96, 128))
        assert bwd.sm90_runs(head_dim, "MASK_INTERVALS", False, False) == (head_dim == 128)
        assert not any(bwd.sm90_runs(head_dim, mask, perm, det) for mask, perm, det in (
            ("MASK_BITS", False, False), ("MASK_NONE", True, False), ("MASK_NONE", False, True)))
        if runs:
            assert bwd.sm90_step_rows(head_dim, runs) == 80
            assert bwd.bwd_sm90_smem_bytes(head_dim, runs) <= kernels.SM90_SMEM_OPTIN


def test_other_tiles_and_the_switch_keep_the_mma_sync_forward(hopper, monkeypatch):
    assert not kernels.uses_sm90(128, (128, 64), 0)  # fwd.cu's alternative tile at 128
    assert not kernels.uses_sm90(256, (128, 128), 0)
    assert not kernels.uses_sm90(128, kernels.tile_for(128, np.float16, device=None, rows=16), 0)  # decode
    monkeypatch.setenv("MASKATTN_SM90", "0")
    assert not kernels.uses_sm90(128, (128, 128), 0)


def test_elsewhere_the_mma_sync_kernels_run(monkeypatch):
    monkeypatch.setattr(kernels, "compute_capability", lambda device_id: "80")
    assert not kernels.uses_sm90(128, (128, 128), 0)
    assert not bwd.uses_sm90(128, (128, 128), 0)


@pytest.mark.parametrize("head_dim", kernels.HEAD_DIMS)
def test_forward_only_plans_take_the_larger_tile_where_it_exists(head_dim, hopper):
    """fwd_sm90.cu's forward-only tiles: 192 x 128 at D = 32 and 64, 192 x 112 at 96, 128 x 176 at 128, 128 x 112 at
    192, 128 x 80 at 256 (its VALID_TILE)."""
    assert kernels.SM90_FORWARD_TILES == {32: (192, 128), 64: (192, 128), 96: (192, 112), 128: (128, 176),
                                          192: (128, 112), 256: (128, 80)}
    tile = kernels.tile_for(head_dim, "bfloat16", device=None, training=False)
    larger = kernels.SM90_FORWARD_TILES.get(head_dim)
    assert tile == (larger or kernels.tile_for(head_dim, "bfloat16", device=None))
    assert kernels.uses_sm90(head_dim, tile, 0)
    decode = kernels.tile_for(head_dim, "bfloat16", device=None, rows=16)
    assert kernels.tile_for(head_dim, "bfloat16", device=None, rows=16, training=False) == decode  # decode first
    if larger:
        assert not bwd.uses_sm90(head_dim, larger, 0)
        assert larger in kernels.forward_only_tiles(head_dim, None)
        # with a node order's row tables on top, but at D = 256's 128 x 80 (no alignment slack either), which takes
        # no plan with one
        fits_rows = kernels.sm90_smem_bytes(head_dim, larger) + kernels.ROW_TABLE_BYTES <= kernels.SM90_SMEM_OPTIN
        assert fits_rows == (head_dim != 256)
        assert kernels.sm90_smem_bytes(head_dim, larger) <= kernels.SM90_SMEM_OPTIN
        assert kernels.sm90_threads(larger[0]) == 128 * (larger[0] // 64 + 1)
        name = kernels.sm90_kernel_name("bf16_t", head_dim, "MASK_NONE", tile=larger)
        assert f"<maskattn::bf16_t, {head_dim}, {larger[0]}, {larger[1]}, maskattn::MASK_NONE" in name


@pytest.mark.parametrize("head_dim", [64, 192])
def test_no_forward_only_tile_without_the_wgmma_forward(head_dim, monkeypatch):
    monkeypatch.setattr(kernels, "compute_capability", lambda device_id: "80")
    monkeypatch.setattr(kernels, "smem_optin", lambda device_id: 166912)  # an A100's
    training = kernels.tile_for(head_dim, "bfloat16", device=0)
    assert kernels.tile_for(head_dim, "bfloat16", device=0, training=False) == training
    assert kernels.SM90_FORWARD_TILES[head_dim] not in kernels.forward_only_tiles(head_dim, 0)


@pytest.mark.parametrize("name, taller", [("full", True), ("causal", True), ("doc_causal", True),
                                          ("shared_question", True), ("lf_global", False), ("bigbird", False)])
def test_the_forward_takes_the_192_row_tile_where_the_mask_lists_little_more_work(name, taller):
    """kernels.forward_plan_pays on WORKLOADS.md's masks at 16k: the 192-row forward was faster on the first four
    and slower on the last two (H200, D = 64, docs/performance.md)."""
    spec = workloads.build(name, 16384)
    plans = [compile_mask(spec, tile=tile) for tile in ((128, 128), kernels.SM90_TILE_192)]
    assert kernels.forward_plan_pays(*plans, 64) == taller


@pytest.mark.parametrize("head_dim, takes_intervals", [(128, False), (256, True)])
def test_forward_only_tiles_that_take_some_plans(head_dim, takes_intervals):
    """D = 128's 128 x 176 forward-only plan is taken for masks without partial tiles (the block-aligned one below),
    D = 256's 128 x 80 for those with intervals too; neither for bit tiles or a node order (ptxas spills, or the row
    tables do not fit); the launch check refuses them, and maskattn.attention runs the training tile's plan. At
    D = 128 maskattn.attention compiles the second plan only where the training tile's has no partial tiles
    (kernels.forward_plan_may_pay), so the block-aligned mask, whose 128 x 128 plan has some, keeps 128 x 128."""
    tile = kernels.SM90_FORWARD_TILES[head_dim]
    rng = np.random.default_rng(0)
    graph = masks.from_graph(sp.random(600, 600, density=0.02, random_state=rng) + sp.eye(600))
    blocks = np.arange(600)[:, None] // 128 + np.arange(600)[None] // tile[1] * 2
    for spec, takes in ((masks.causal(600), takes_intervals), (masks.full(600), True),
                        (masks.from_dense(blocks % 3 != 0), True),
                        (masks.from_dense(rng.random((600, 600)) < 0.3), False), (graph, False)):
        plan, forward_plan = (compile_mask(spec, tile=t) for t in (kernels.sm90_tile(head_dim), tile))
        assert kernels.sm90_forward_tile_takes(head_dim, forward_plan) == takes
        assert kernels.forward_plan_pays(plan, forward_plan, head_dim) == takes
        assert kernels.forward_plan_may_pay(plan, head_dim) == (takes_intervals or plan.payload == "none")
    assert kernels.forward_plan_may_pay(compile_mask(masks.causal(600), tile=(192, 128)), 64)
