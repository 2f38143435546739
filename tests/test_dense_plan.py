"""Plans of dense masks built on the GPU, checked on the CPU through their NumPy twin (``plans.plan_reference``, which
tests/gpu/test_dense_plan.py holds the kernels to byte for byte): the device layout encodes exactly the host
compiler's plan, and a plan built on a device reads back on first use."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import maskattn
from maskattn import masks
from maskattn._maskprep.plan import rank_levels
from maskattn.backends.cuda import plans
from maskattn.plan import PARTIAL, BlockMask

from test_plan import BUILDERS, TILES, check_buffer, check_transpose


def twin_plan(mask, tile):
    """The host plan of the twin's device buffer, read back as the device path reads it back."""
    B, H, n_q, n_k = mask.shape
    buffer = plans.plan_reference(mask, tile)
    layout, size = plans.dense_layout(B * H, n_q, n_k, tile)
    assert buffer.nbytes == size and all(offset % 16 == 0 for offset, _, _ in layout.values())
    views = plans._views(buffer, layout)
    return BlockMask(mask.shape, tile, plans.host_arrays(views, views["bit_pool"][plans._partial_tiles(views)])), views


def check_twin(mask, tile):
    plan, views = twin_plan(mask, tile)
    host = maskattn.compile_mask(masks.from_dense(mask), tile)
    assert plan.equals(host)
    assert np.array_equal(plan.to_dense(), mask)
    for name in ("row_ptr", "col_idx", "kind", "col_ptr", "row_idx", "bwd_kind", "m_order", "n_order"):
        assert np.array_equal(getattr(plan, name), getattr(host, name)), name
    # the CTA orders' runs, as a host plan's upload gives them
    assert np.array_equal(views["m_levels"], rank_levels(host.row_ptr, host.m_order))
    assert np.array_equal(views["n_levels"], rank_levels(host.col_ptr, host.n_order))
    check_transpose(plan, deduplicated=False)  # the device pool has a slot per tile: equal tiles stay apart
    check_buffer(plan)
    # on the device a PARTIAL entry's payload is its tile, in both directions; FULL entries have none
    nnz = plan.nnz
    tiles = np.arange(views["tile_kind"].size).reshape(plan.groups, plan.n_mblocks, plan.n_nblocks)
    fwd_tiles = tiles[np.repeat(np.repeat(np.arange(plan.groups), plan.n_mblocks), np.diff(plan.row_ptr).ravel()),
                      plan.entry_rows, plan.col_idx]
    assert np.array_equal(views["payload_idx"][:nnz], np.where(plan.kind == PARTIAL, fwd_tiles, -1))
    partial = views["bwd_kind"][:nnz] == PARTIAL
    assert np.all(views["tile_kind"][views["bwd_payload_idx"][:nnz][partial]] == PARTIAL)
    grids = np.stack([plan.block_grid(g) for g in range(plan.groups)])
    assert np.array_equal(views["tile_kind"].reshape(tiles.shape), grids)
    return plan


@pytest.mark.parametrize("tile", TILES, ids=str)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_twin_encodes_every_family(name, tile):
    spec = BUILDERS[name]()
    dense = spec.to_dense()
    if spec.perm is not None:  # a GPU mask is planned in the order it comes in
        dense = dense[..., spec.perm, :][..., spec.perm]
    check_twin(np.ascontiguousarray(dense), tile)


@st.composite
def dense_masks(draw):
    B, H = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 3]))
    n_q, n_k = draw(st.integers(1, 300)), draw(st.integers(1, 300))
    density = draw(st.sampled_from([0.0, 0.002, 0.05, 0.5, 0.97, 1.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    mask = rng.random((B, H, n_q, n_k)) < density
    if draw(st.booleans()):  # FULL tiles and repeated PARTIAL ones
        cell = draw(st.sampled_from([8, 16, 48]))
        mask = np.repeat(np.repeat(mask[..., ::cell, ::cell], cell, axis=-2), cell, axis=-1)[..., :n_q, :n_k]
    return np.ascontiguousarray(mask)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dense_masks(), st.sampled_from(TILES))
def test_twin_random_masks(mask, tile):
    check_twin(mask, tile)


def test_plan_built_on_device_reads_back_on_first_use():
    rng = np.random.default_rng(5)
    mask = rng.random((2, 1, 150, 170)) < 0.1
    host = maskattn.compile_mask(masks.from_dense(mask), (64, 48))
    fetched = []

    def fetch():
        fetched.append(1)
        buffer = plans.plan_reference(mask, (64, 48))
        views = plans._views(buffer, plans.dense_layout(2, 150, 170, (64, 48))[0])
        return plans.host_arrays(views, views["bit_pool"][plans._partial_tiles(views)])

    plan = BlockMask.built_on_device(mask.shape, (64, 48), 0, "device arrays", fetch, transient=True)
    # what a launch reads needs no copy back
    assert not plan.on_host and plan.payload == "bits" and plan.transient and plan.perm is None
    assert (plan.n_mblocks, plan.n_nblocks, plan.groups) == (3, 4, 2) and not fetched
    assert plan._device_cache == {0: "device arrays"}
    assert plan.equals(host) and plan.on_host and fetched == [1]
    assert np.array_equal(plan.to_dense(), mask) and plan.stats()["density"] == host.stats()["density"]
    assert plan.buffer is plan.buffer and fetched == [1]
    assert not maskattn.compile_mask(masks.causal(64)).transient


def test_twin_rejects_what_the_kernels_do_not_take():
    with pytest.raises(TypeError, match="4-d bool"):
        plans.plan_reference(np.ones((3, 4), bool), (16, 16))
    with pytest.raises(ValueError, match="multiples of 16"):
        plans.plan_reference(np.ones((1, 1, 3, 4), bool), (8, 16))


def test_launch_pointers_move_to_a_plan_laid_out_alike():
    """A prepared launch runs the next transient plan of its geometry by moving the pointer arguments that lie in the
    old plan's buffer by the distance to the new one; other pointers and integer arguments stay."""
    import ctypes

    from maskattn.backends.cuda.launch import Launcher

    launcher = Launcher.__new__(Launcher)  # the arguments alone: no kernel, no CuPy
    launcher.fixed = [ctypes.c_int64(1500), ctypes.c_uint64(1000), ctypes.c_uint64(1999), ctypes.c_uint64(0),
                      ctypes.c_int32(1200), ctypes.c_uint64(2000), ctypes.c_uint64(999)]
    launcher.move_pointers(1000, 2000, 7000)
    assert [x.value for x in launcher.fixed] == [1500, 7000, 7999, 0, 1200, 2000, 999]


@pytest.mark.parametrize("name", ["full", "causal", "document_batch", "graph_rcm_perm"])
def test_upload_pieces_hold_every_array_at_its_offset(name):
    mask = (masks.from_graph(np.random.default_rng(1).random((90, 90)) < 0.05, reorder="rcm")
            if name == "graph_rcm_perm" else BUILDERS[name]())
    plan = maskattn.compile_mask(mask, (32, 48))
    assert (plan.perm is not None) == (name == "graph_rcm_perm")
    pieces, layout = plans.upload_pieces(plan)
    uploaded = np.concatenate(pieces)
    added = {"m_levels": rank_levels(plan.row_ptr, plan.m_order), "n_levels": rank_levels(plan.col_ptr, plan.n_order),
             "perm": plan.perm}
    # runs only where one holds more than a rank
    runs = {array for array in ("m_levels", "n_levels") if np.any(added[array][:, 1] - added[array][:, 0] > 1)}
    assert set(layout) == set(plan.layout) | runs | ({"perm"} if plan.perm is not None else set())
    for array, (offset, shape, dtype) in layout.items():
        assert offset % 16 == 0 and offset + int(np.prod(shape)) * dtype.itemsize <= uploaded.nbytes, array
        expected = added[array] if array in added else getattr(plan, array)
        assert np.array_equal(np.ndarray(shape, dtype, uploaded, offset), expected), array


def test_upload_skips_runs_of_one_rank():
    """One query block (decode, tree verification) is a run of one: the kernels get no runs there and skip their
    load; a full mask's rows are one run."""
    for mask, tile, expected in ((masks.full(16, 32), (32, 32), set()), (masks.full(40, 256), (48, 32), {"n_levels"}),
                                 (masks.full(256), (32, 32), {"m_levels", "n_levels"})):
        layout = plans.upload_pieces(maskattn.compile_mask(mask, tile))[1]
        assert {"m_levels", "n_levels"} & set(layout) == expected, (mask, tile)
