"""maskattn.distributed on the CPU: restricted plans and splits in this process, then gloo groups of 2 and 3 ranks
(spawned once per size, every case run inside) whose float64 outputs and gradients must equal single-process
maskattn.torch.attention for every mask family, through the all-to-all (packed and overlapped) and the ring."""

import importlib
import itertools
import json
import os
from datetime import timedelta

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import maskattn  # noqa: E402
from maskattn import masks  # noqa: E402
from maskattn import distributed as md  # noqa: E402
from maskattn.distributed.plan import balanced_cuts, restrict  # noqa: E402
from maskattn.testing import random_geometric, spawn_ranks  # noqa: E402

N = 203  # not a multiple of any tile: the last query and key blocks are short
TILE = (32, 32)
SPAWN_SECONDS = 150  # a hung collective fails the test instead of the CI job


def _spec(name: str):
    if name == "causal":
        return masks.causal(N)
    if name == "sink_swa":
        return masks.sliding_window(N, left=40, sinks=5)
    if name == "documents":  # documents cross every rank boundary
        return masks.document([45, 90, 68])
    if name == "shared_question":
        return masks.shared_question([40, 30], [[20, 15], [40, 30, 28]])
    if name == "batch_documents":  # one packing per sample (mask batch 2)
        return masks.document([[50, 153], [100, 103]])
    if name == "bigbird":
        return masks.bigbird(N, 16, seed=1)
    if name == "graph_rcm":
        return masks.from_graph(random_geometric(N, degree=8, seed=2))
    if name == "heads_dense":  # a bit mask per head (GQA: 4 query heads, 2 KV heads)
        rng = np.random.default_rng(3)
        return masks.from_dense((rng.random((1, 4, N, N)) < 0.15) | np.eye(N, dtype=bool))
    if name == "dilated":
        return masks.longformer(N, 24, dilation=2)
    if name == "short":  # fewer units than ranks: a rank with no tokens at 3 ranks
        return masks.causal(40)
    if name == "idle_rows":  # rows from 96 on see nothing
        dense = np.tril(np.ones((N, N), bool))
        dense[96:] = False
        return masks.from_dense(dense)
    if name == "aligned_documents":  # documents on rank boundaries: nothing moves at all
        return masks.document([64, 64, 75])
    raise ValueError(name)


# (case, mask, tile, split or {world_size: split}); every case runs at 2 and 3 ranks
CASES = {
    "causal": ("causal", TILE, "work"),
    "causal_tile_16x32": ("causal", (16, 32), "work"),
    "causal_zigzag": ("causal", TILE, "zigzag"),
    "sink_swa": ("sink_swa", TILE, "work"),
    "documents": ("documents", TILE, "work"),
    "documents_even": ("documents", TILE, "even"),
    "shared_question": ("shared_question", TILE, "work"),
    "batch_documents": ("batch_documents", TILE, "work"),
    "bigbird": ("bigbird", TILE, "work"),
    "bigbird_zigzag": ("bigbird", TILE, "zigzag"),  # fetched blocks arrive out of ascending order
    "graph_rcm": ("graph_rcm", TILE, "work"),
    "heads_dense_gqa": ("heads_dense", TILE, "work"),
    "dilated_longformer": ("dilated", TILE, "work"),
    "rank_without_tokens": ("short", TILE, "work"),
    "rank_without_work": ("idle_rows", TILE, {2: [0, 3, 7], 3: [0, 2, 3, 7]}),
    "nothing_moves": ("aligned_documents", TILE, {2: [0, 2, 7], 3: [0, 2, 4, 7]}),
}
MODES = ("packed", "overlap", "ring")
B, H, HK, D = 2, 4, 2, 16  # GQA everywhere


def _split(split, world):
    return split[world] if isinstance(split, dict) else split


def _inputs(n):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, n, D, dtype=torch.float64, generator=g)
    k, v = (torch.randn(B, HK, n, D, dtype=torch.float64, generator=g) for _ in range(2))
    do = torch.randn(B, H, n, D, dtype=torch.float64, generator=g)
    return q, k, v, do


def _reference(spec, tile, q, k, v, do):
    q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
    out = maskattn.torch.attention(q, k, v, maskattn.compile_mask(spec, tile))
    out.backward(do)
    return out.detach(), q.grad, k.grad, v.grad


def _run_case(case, world, group=None):
    """Every mode of one case on this rank: max |error| of out, dq, dk, dv against the single-process reference on
    this rank's tokens, of the undispatched output, and the bytes sent against the plan's accounting."""
    name, tile, split = CASES[case]
    spec = _spec(name)
    sharded = md.shard(spec, group, tile=tile, split=_split(split, world))
    q, k, v, do = _inputs(spec.n_q)
    ref = _reference(spec, tile, q, k, v, do)
    tokens = torch.as_tensor(sharded.local_tokens())
    row_bytes = 2 * B * HK * D * 8  # K and V of one token
    report = {"stats": sharded.stats()}
    for mode in MODES:
        md.reset_traffic()
        local = [md.dispatch(x, sharded).requires_grad_() for x in (q, k, v)]
        if mode == "ring":
            out = md.ring_attention(*local, sharded)
        else:
            out = md.attention(*local, sharded, overlap=mode == "overlap")
        out.backward(md.dispatch(do, sharded))
        got = (out.detach(), *(x.grad for x in local))
        errors = [float((a - b[:, :, tokens]).abs().max()) if a.numel() else 0.0 for a, b in zip(got, ref)]
        errors.append(float((md.undispatch(out.detach(), sharded) - ref[0]).abs().max()))
        report[mode] = {"errors": errors, "traffic": dict(md.traffic)}
    r = sharded.rank
    report["expected"] = {"kv": int(sharded.send_tokens[r].sum()) * row_bytes,
                          "dkv": int(sharded.send_tokens[:, r].sum()) * row_bytes}
    return report


def _worker(rank, world, init_file, out_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=30))
    torch.set_num_threads(1)
    results = {}
    for case in CASES:
        try:
            results[case] = _run_case(case, world)
        except Exception as err:  # reported by the tests; the other ranks time out of the case's collectives
            results[case] = {"error": f"{type(err).__name__}: {err}"}
            break
    # a group that is not the default one: ranks 1.. (a ring of one rank at world size 2), rank 0 outside it
    subgroup = dist.new_group(list(range(1, world)))
    if rank > 0 and all("error" not in r for r in results.values()):
        try:
            results["subgroup"] = _run_case("documents", world - 1, subgroup)
        except Exception as err:
            results["subgroup"] = {"error": f"{type(err).__name__}: {err}"}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


@pytest.fixture(scope="module", params=[2, 3], ids=lambda w: f"{w}ranks")
def ranks(request, tmp_path_factory):
    """Spawn a gloo group of this many ranks once; every case runs in it. Returns (world, [per-rank results])."""
    world = request.param
    return world, spawn_ranks(_worker, world, tmp_path_factory.mktemp(f"gloo{world}"), SPAWN_SECONDS)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_equals_single_process(ranks, case, mode):
    world, results = ranks
    for rank, result in enumerate(results):
        report = result.get(case, {"error": "not run: an earlier case failed"})
        assert "error" not in report, f"rank {rank}: {report.get('error')}"
        errors = report[mode]["errors"]
        assert max(errors) < 1e-12, f"rank {rank} {mode}: |error| of out, dq, dk, dv, undispatched out = {errors}"


def test_a_subgroup(ranks):
    """A process group other than the default one (its ranks are not the global ones): ranks 1 .. world - 1."""
    world, results = ranks
    for rank, result in enumerate(results[1:], start=1):
        report = result.get("subgroup", {"error": "not run"})
        assert "error" not in report, f"rank {rank}: {report['error']}"
        for mode in MODES:
            assert max(report[mode]["errors"]) < 1e-12, (rank, mode, report[mode]["errors"])


@pytest.mark.parametrize("case", list(CASES))
def test_sends_exactly_the_referenced_blocks(ranks, case):
    """Forward bytes are the K/V of the blocks other ranks' rows reference, backward bytes their dK/dV, both ways."""
    world, results = ranks
    for rank, result in enumerate(results):
        expected = result[case]["expected"]
        for mode in ("packed", "overlap"):
            sent = result[case][mode]["traffic"]
            assert sent.get("kv", 0) == expected["kv"], (rank, mode, sent, expected)
            assert sent.get("dkv", 0) == expected["dkv"], (rank, mode, sent, expected)


def test_the_edge_cases_happen(ranks):
    """The cases named for an edge meet it: a rank without tokens, one whose rows see nothing, one that fetches
    nothing, one that sends nothing, an exchange where nothing moves, ranks with unequal token counts."""
    world, results = ranks
    stats = {case: results[0][case]["stats"] for case in CASES}
    if world == 3:
        assert 0 in stats["rank_without_tokens"]["tokens"]
    assert 0.0 in stats["rank_without_work"]["work"]
    assert stats["causal"]["fetched_tokens"][0] == 0 and stats["causal"]["sent_tokens"][-1] == 0
    assert sum(stats["nothing_moves"]["sent_tokens"]) == 0
    assert len(set(stats["documents"]["tokens"])) > 1
    assert all(stats[case] == results[r][case]["stats"] for case in CASES for r in range(world))  # same plan


# ---- in this process: restricted plans, splits, traffic -------------------------------------------------------------

FAMILIES = ("causal", "sink_swa", "documents", "shared_question", "batch_documents", "bigbird", "graph_rcm",
            "heads_dense", "dilated")


def _positions(blocks, tile, n):
    return np.concatenate([np.arange(b * tile, min((b + 1) * tile, n)) for b in blocks] + [np.zeros(0, int)])


@pytest.mark.parametrize("tile", [(32, 32), (16, 32), (32, 16)])
@pytest.mark.parametrize("name", FAMILIES)
def test_restrict_encodes_the_sub_mask(name, tile):
    """Rows of some query blocks against some key blocks: exactly the global plan's mask there."""
    plan = maskattn.compile_mask(_spec(name), tile)
    dense = plan.to_dense()  # in plan order, as restrict works
    rng = np.random.default_rng(sum(map(ord, name)) + tile[0])
    M, N_blocks = plan.n_mblocks, plan.n_nblocks
    for _ in range(8):
        rows = np.sort(rng.choice(M, int(rng.integers(1, M + 1)), replace=False))
        keys = np.sort(rng.choice(N_blocks, int(rng.integers(1, N_blocks + 1)), replace=False))
        sub = restrict(plan, rows, keys)
        want = dense[:, :, _positions(rows, tile[0], N)][:, :, :, _positions(keys, tile[1], N)]
        assert sub.perm is None and sub.payload in (plan.payload, "none")
        assert np.array_equal(sub.to_dense(), want)
        # the backward CSR is the transpose of the forward one
        for g in range(sub.groups):
            fwd = {(m, n) for m in range(sub.n_mblocks) for n, _, _ in sub.entries(g, m)}
            lo, hi = sub.col_ptr[g, 0], sub.col_ptr[g, -1]
            cols = np.repeat(np.arange(sub.n_nblocks), np.diff(sub.col_ptr[g]))
            assert fwd == set(zip(sub.row_idx[lo:hi].tolist(), cols.tolist()))


@pytest.mark.parametrize("name", FAMILIES)
def test_restrict_to_everything_is_the_plan(name):
    """Every array the compiler writes, the heaviest-first orders and interval bounds included, comes out the same."""
    plan = maskattn.compile_mask(_spec(name), TILE)
    sub = restrict(plan, np.arange(plan.n_mblocks), np.arange(plan.n_nblocks))
    for array in ("row_ptr", "col_idx", "kind", "col_ptr", "row_idx", "bwd_kind", "m_order", "n_order", "intervals",
                  "interval_minmax"):
        a, b = getattr(sub, array), getattr(plan, array)
        assert (a is None) == (b is None) and (a is None or np.array_equal(a, b)), array
    if plan.bit_pool is not None:
        for kind, idx in (("kind", "payload_idx"), ("bwd_kind", "bwd_payload_idx")):
            partial = getattr(plan, kind) == 2
            assert np.array_equal(sub.bit_pool[getattr(sub, idx)[partial]],
                                  plan.bit_pool[getattr(plan, idx)[partial]])


def test_restrict_takes_ascending_blocks():
    """Ascending keys keep each row's entries ascending and a short last block last, as the kernels need."""
    plan = maskattn.compile_mask(masks.causal(N), TILE)
    for rows, keys in (([0, 1], [6, 0]), ([1, 0], [0]), ([0], [0, 7])):
        with pytest.raises(ValueError, match="ascending"):
            restrict(plan, rows, keys)


def test_balanced_cuts_are_optimal():
    """Against every contiguous split of small random loads: the heaviest part is as light as it can be."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        units, parts = int(rng.integers(1, 9)), int(rng.integers(1, 4))
        work = rng.integers(0, 5, units).astype(float)
        cuts = balanced_cuts(work, parts)
        assert cuts[0] == 0 and cuts[-1] == units and np.all(np.diff(cuts) >= 0)
        heaviest = max(work[a:b].sum() for a, b in zip(cuts[:-1], cuts[1:]))
        best = min(max(work[a:b].sum() for a, b in zip((0, *c), (*c, units)))
                   for c in itertools.combinations_with_replacement(range(units + 1), parts - 1))
        assert heaviest <= best + 1e-9


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("name", ["causal", "documents", "graph_rcm", "bigbird"])
def test_split_covers_every_token_once_and_balances(name, world):
    plan = maskattn.compile_mask(_spec(name), (16, 16))
    plans = [md.shard(plan, world_size=world, rank=r) for r in range(world)]
    owned = np.concatenate([p.positions() for p in plans])
    assert np.array_equal(np.sort(owned), np.arange(N))
    assert all(np.array_equal(p.send_tokens, plans[0].send_tokens) for p in plans)  # no communication needed
    even = md.shard(plan, world_size=world, rank=0, split="even")
    assert plans[0].work.max() <= even.work.max() + 1e-9
    tokens = [np.asarray(p.local_tokens()) for p in plans]
    perm = np.arange(N) if plan.perm is None else plan.perm
    assert np.array_equal(np.sort(np.concatenate(tokens)), np.arange(N))
    assert all(np.array_equal(t, perm[p.positions()]) for t, p in zip(tokens, plans))


@pytest.mark.parametrize("name", ["causal", "sink_swa", "documents", "graph_rcm", "heads_dense"])
def test_fetches_exactly_the_referenced_key_blocks(name):
    """A rank fetches the blocks of other ranks its rows have a listed tile with, and every key it really sees."""
    plan = maskattn.compile_mask(_spec(name), TILE)
    dense = plan.to_dense().any(axis=(0, 1))
    grids = [plan.block_grid(g) > 0 for g in range(plan.groups)]
    listed = np.logical_or.reduce(grids)
    for r in range(3):
        sharded = md.shard(plan, world_size=3, rank=r)
        rows = sharded.row_blocks()
        want = np.flatnonzero(listed[rows].any(axis=0) & (sharded.key_owner != r))
        assert np.array_equal(np.sort(sharded.remote_blocks()), want)
        seen = np.flatnonzero(dense[sharded.positions()].any(axis=0))
        held = np.concatenate([sharded.positions(), _positions(sharded.remote_blocks(), TILE[1], N)])
        assert np.isin(seen, held).all()
        for s in range(3):
            if s != r:
                blocks = sharded.remote_blocks()[sharded.key_owner[sharded.remote_blocks()] == s]
                assert sharded.send_tokens[s, r] == _positions(blocks, TILE[1], N).size


def test_out_of_order_arrivals_are_gathered():
    """With a zigzag split a rank may receive a later block from a lower rank: the plans index ascending blocks."""
    plan = maskattn.compile_mask(_spec("bigbird"), TILE)
    orders = [md.shard(plan, world_size=3, rank=r, split="zigzag").remote_index() for r in range(3)]
    assert any(order is not None for order in orders)
    assert all(md.shard(plan, world_size=3, rank=r).remote_index() is None for r in range(3))


def test_packed_keys_are_one_concatenation_on_contiguous_splits():
    """On a contiguous split the packed keys are (fetched below, own, fetched above) in arrival order, so the packed
    path concatenates without a gather; on a zigzag split the layout is recognised only where it holds. Keys fetched
    by two ranks come back twice (the float32 addition)."""
    def assert_ascending(sharded, first):
        arrived = _positions(sharded.arrival_blocks(), TILE[1], N)
        held = np.concatenate([arrived[:first], sharded.positions(), arrived[first:]])
        assert np.array_equal(held, np.sort(held))

    plan = maskattn.compile_mask(_spec("causal"), TILE)
    for world in (2, 3):
        for r in range(world):
            sharded = md.shard(plan, world_size=world, rank=r)
            assert_ascending(sharded, sharded.fetched_before())
            assert sharded.sends_once() == (r > 0 or world == 2)  # at 3 ranks rank 0 sends its keys to 1 and 2
    zigzag = [md.shard(plan, world_size=3, rank=r, split="zigzag") for r in range(3)]
    for sharded in zigzag:
        if sharded.fetched_before() is not None:
            assert_ascending(sharded, sharded.fetched_before())
    assert any(sharded.fetched_before() is None for sharded in zigzag)


@pytest.mark.parametrize("name", ["causal", "bigbird"])
@pytest.mark.parametrize("sliced_runs", [0, 64])
@pytest.mark.parametrize("world", [2, 3])
def test_sent_rows_and_returned_partials_follow_the_send_index(name, sliced_runs, world, monkeypatch):
    """Gradients returned add to the right keys, by slices over runs of consecutive keys or by one index_add_, each
    element rounded once to bf16: where each key comes back once (rank 0 of 2) in place, where keys come back from
    several ranks (rank 0 of 3) summed in float32 first; the rows sent are the keys at send_index, copied by the same
    runs or gathered."""
    attention = importlib.import_module("maskattn.distributed.attention")  # the package's attention is the function
    monkeypatch.setattr(attention, "SLICED_RUNS", sliced_runs)
    plan = maskattn.compile_mask(_spec(name), TILE)
    sharded = md.shard(plan, world_size=world, rank=0)
    assert sharded.sends_once() == (world == 2)
    index = sharded.send_index()
    runs = sharded.send_runs()
    assert np.array_equal(np.concatenate([np.arange(p, p + n) for _, p, n in runs]), index)
    assert np.array_equal(runs[:, 0], np.concatenate([[0], np.cumsum(runs[:-1, 2])]))
    gen = torch.Generator().manual_seed(1)
    own = sharded.positions().size
    dk, dv = (torch.randn(1, 2, own, 8, generator=gen).to(torch.bfloat16) for _ in range(2))
    returned = torch.randn(index.size, 2, 1, 2, 8, generator=gen).to(torch.bfloat16)
    want = torch.stack((dk, dv)).double()
    for row, position in enumerate(index):
        want[:, :, :, position] += returned[row].double()
    got = attention._add_returned(dk.clone(), dv.clone(), returned, sharded)
    assert all(g.dtype == torch.bfloat16 and g.is_contiguous() for g in got)
    assert torch.equal(torch.stack(got), want.to(torch.float32).to(torch.bfloat16))
    send = attention._send_rows(dk, dv, sharded)  # the rows sent, the same ways
    rows = torch.stack((dk.permute(2, 0, 1, 3), dv.permute(2, 0, 1, 3)), dim=1)  # (own, 2, B, Hk, D)
    assert torch.equal(send, rows[torch.as_tensor(index)])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("D", [3, 8, 64])
def test_copy_words_copies_strided_slices(dtype, D):
    """The packed path's copies through 8-byte words: into and out of strided slices and token-major views, and
    element by element where a layout does not allow words (D = 3 of bf16, an odd offset, on either side)."""
    from maskattn.distributed.exchange import copy_words, kv_views, token_major

    gen = torch.Generator().manual_seed(D)
    src = torch.randn(2, 3, 11, D, generator=gen).to(dtype)
    held = torch.zeros(2, 3, 20, D, dtype=dtype)
    for lo in (0, 1, 4, 9):
        target = held[:, :, lo:lo + 11]
        assert copy_words(target, src) is target
        assert torch.equal(target, src)
        back = copy_words(torch.empty_like(src), held[:, :, lo:lo + 11])
        assert back.is_contiguous() and torch.equal(back, src)
    odd = torch.zeros(2, 3, 11, D + 1, dtype=dtype)[..., 1:]  # one side without words: element by element
    assert torch.equal(copy_words(odd, src), src) and torch.equal(copy_words(torch.empty_like(src), odd), src)
    rows = token_major(src, 2 * src)
    assert torch.equal(rows, torch.stack((src.permute(2, 0, 1, 3), 2 * src.permute(2, 0, 1, 3)), dim=1))
    k, v = kv_views(rows)
    assert torch.equal(k, src) and torch.equal(v, 2 * src)


def test_shard_checks_its_arguments():
    with pytest.raises(ValueError, match="n_q"):
        md.shard(masks.causal(64, 128), world_size=2, rank=0)
    with pytest.raises(ValueError, match="boundaries"):
        md.shard(masks.causal(N), tile=TILE, world_size=2, rank=0, split=[0, 9, 7])
    with pytest.raises(ValueError, match="split"):
        md.shard(masks.causal(N), tile=TILE, world_size=2, rank=0, split="round-robin")
    sharded = md.shard(masks.causal(N), tile=TILE, world_size=2, rank=0)
    q = torch.zeros(1, 2, N, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match="holds"):
        md.attention(q, q, q, sharded)
