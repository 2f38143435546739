"""maskattn.distributed on GPUs with NCCL, two ranks (nvidia-h200-x2) or ``MASKATTN_TEST_RANKS`` (4 on
nvidia-h200-x4): every family through the all-to-all (packed and overlapped) and the ring, bf16 and fp16, against one
GPU and against a float32 dense reference, as ``tests/gpu`` judges kernels: ``err(N GPUs) <= 2 * err(one GPU) +
atol``; the bytes sent are the referenced blocks'; a rank with nothing to send does not hang the exchange (the whole
run has a deadline)."""

import json
import os
from datetime import timedelta

import numpy as np
import pytest

WORLD = int(os.environ.get("MASKATTN_TEST_RANKS", "2"))
torch = pytest.importorskip("torch", reason="needs torch")
if torch.cuda.device_count() < WORLD:
    pytest.skip(f"needs {WORLD} CUDA devices (MASKATTN_TEST_RANKS)", allow_module_level=True)
pytest.importorskip("cupy", reason="the CUDA backend needs CuPy")
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_nccl_available():
    pytest.skip("torch.distributed with NCCL is not available", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import maskattn  # noqa: E402
from maskattn import distributed as md  # noqa: E402
from maskattn import masks  # noqa: E402
from maskattn.testing import spawn_ranks  # noqa: E402

N = 3001  # not a multiple of the tile
B, H, HK, D = 1, 8, 2, 128
UNITS = 24  # of 128 tokens: N rounded up
BOUNDARIES = [r * UNITS // WORLD for r in range(WORLD + 1)]  # a split on whole documents (aligned_documents)
DEADLINE_SECONDS = 900  # kernel builds included
ATOL = 1e-3


def _spec(name):
    if name == "causal":
        return masks.causal(N)
    if name == "sink_swa":
        return masks.sliding_window(N, left=300, sinks=16)
    if name == "documents":
        return masks.document([700, 1300, 1001])
    if name == "shared_question":
        return masks.shared_question([500, 400], [[300, 200], [600, 500, 501]])
    if name == "bigbird":
        return masks.bigbird(N, 64, seed=1)
    if name == "graph_rcm":
        pts = np.random.default_rng(N).random((N, 2))
        return masks.from_graph(np.linalg.norm(pts[:, None] - pts[None], axis=-1) < 0.05)
    if name == "heads_dense":  # a bit mask per query head
        rng = np.random.default_rng(3)
        return masks.from_dense((rng.random((1, H, N, N)) < 0.1) | np.eye(N, dtype=bool))
    if name == "aligned_documents":  # documents on the rank boundaries: nothing moves
        lengths = [128 * (hi - lo) for lo, hi in zip(BOUNDARIES[:-1], BOUNDARIES[1:])]
        return masks.document(lengths[:-1] + [N - sum(lengths[:-1])])
    raise ValueError(name)


# case -> (mask, split); every row sees a key, so the dense reference has no empty softmax
CASES = {
    "causal": ("causal", "work"),
    "causal_zigzag": ("causal", "zigzag"),
    "sink_swa": ("sink_swa", "work"),
    "documents": ("documents", "work"),
    "shared_question": ("shared_question", "work"),
    "bigbird": ("bigbird", "work"),
    "graph_rcm": ("graph_rcm", "work"),
    "heads_dense_gqa": ("heads_dense", "work"),
    "nothing_moves": ("aligned_documents", BOUNDARIES),  # units of 128 tokens
}
MODES = ("packed", "overlap", "ring")
DTYPES = ("bfloat16", "float16")


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm()) if b.numel() else 0.0


def _dense_reference(spec, q, k, v, do):
    """float32 SDPA with the dense mask (GQA by repeating K and V): out and gradients."""
    q, k, v = (x.detach().float().requires_grad_() for x in (q, k, v))
    rep = H // HK
    mask = torch.as_tensor(spec.to_dense(), device=q.device)
    out = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), attn_mask=mask)
    out.backward(do.float())
    return [x.detach() for x in (out, q.grad, k.grad, v.grad)]


def _case(case, dtype_name, device):
    name, split = CASES[case]
    spec = _spec(name)
    dtype = getattr(torch, dtype_name)
    if device.type == "cuda":
        from maskattn.backends.cuda import tile_for

        tile = tile_for(D, dtype_name, device.index)
    else:  # a dry run of this file on CPUs (gloo, float32 reference)
        tile, dtype = (128, 128), torch.float32
    plan = maskattn.compile_mask(spec, tile)
    if not isinstance(split, str):
        split = [c * 128 // int(np.lcm(*tile)) for c in split]
    sharded = md.shard(plan, split=split)
    g = torch.Generator(device=device).manual_seed(7)
    q = torch.randn(B, H, N, D, device=device, dtype=dtype, generator=g)
    k, v = (torch.randn(B, HK, N, D, device=device, dtype=dtype, generator=g) for _ in range(2))
    do = torch.randn(B, H, N, D, device=device, dtype=dtype, generator=g)
    reference = _dense_reference(spec, q, k, v, do)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = maskattn.torch.attention(*leaves, plan)
    out.backward(do)
    single = [out.detach(), *(x.grad for x in leaves)]
    tokens = torch.as_tensor(sharded.local_tokens(), device=device)
    mine = [x[:, :, tokens] for x in reference]
    report = {"single": [_rel(a[:, :, tokens], b) for a, b in zip(single, mine)]}
    row_bytes = 2 * B * HK * D * q.element_size()
    for mode in MODES:
        md.reset_traffic()
        local = [md.dispatch(x, sharded).requires_grad_() for x in (q, k, v)]
        attend = md.ring_attention if mode == "ring" else md.attention
        out = attend(*local, sharded, **({} if mode == "ring" else {"overlap": mode == "overlap"}))
        out.backward(md.dispatch(do, sharded))
        got = [out.detach(), *(x.grad for x in local)]
        report[mode] = {"errors": [_rel(a, b) for a, b in zip(got, mine)],
                        "nan": any(bool(torch.isnan(x).any()) for x in got),
                        "vs_single": [_rel(a, b[:, :, tokens]) for a, b in zip(got, single)],
                        "traffic": dict(md.traffic)}
    r = sharded.rank
    report["expected"] = {"kv": int(sharded.send_tokens[r].sum()) * row_bytes,
                          "dkv": int(sharded.send_tokens[:, r].sum()) * row_bytes}
    return report


def _worker(rank, world, init_file, out_dir, keys, device_type="cuda"):
    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off (KINDS.md)
        os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"file://{init_file}",
                            rank=rank, world_size=world, timeout=timedelta(seconds=300),
                            **({"device_id": device} if device.type == "cuda" else {}))
    results = {}
    for case, dtype_name in keys:
        key = f"{case}-{dtype_name}"
        try:
            results[key] = _case(case, dtype_name, device)
        except Exception as err:  # reported by the tests; the other rank times out of the collectives
            results[key] = {"error": f"{type(err).__name__}: {err}"}
            break
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def results(request, tmp_path_factory):
    """The (case, dtype) pairs that the selected tests read, in CASES order, on WORLD ranks (a hung exchange fails at
    the deadline): ``-k`` narrows the run itself, not only what is reported."""
    wanted = set()
    for item in request.session.items:
        params = getattr(item, "callspec", None)
        if item.module is request.module and params is not None:
            wanted.add((params.params["case"], params.params.get("dtype_name", "bfloat16")))
    keys = [(case, dtype_name) for case in CASES for dtype_name in DTYPES if (case, dtype_name) in wanted]
    return spawn_ranks(_worker, WORLD, tmp_path_factory.mktemp("nccl"), DEADLINE_SECONDS, keys, "cuda")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("case", list(CASES))
def test_two_gpus_as_accurate_as_one(results, case, dtype_name, mode):
    for rank, result in enumerate(results):
        report = result.get(f"{case}-{dtype_name}", {"error": "not run: an earlier case failed"})
        assert "error" not in report, f"rank {rank}: {report['error']}"
        got = report[mode]
        assert not got["nan"], f"rank {rank} {mode}: NaN"
        for what, err, base in zip(("out", "dq", "dk", "dv"), got["errors"], report["single"]):
            assert err <= 2 * base + ATOL, f"rank {rank} {mode} {what}: {err:.2e} against one GPU's {base:.2e}"


@pytest.mark.parametrize("case", list(CASES))
def test_bytes_are_the_referenced_blocks(results, case):
    for rank, result in enumerate(results):
        report = result.get(f"{case}-bfloat16", {"error": "not run"})
        assert "error" not in report, report["error"]
        for mode in ("packed", "overlap"):
            sent = report[mode]["traffic"]
            assert (sent.get("kv", 0), sent.get("dkv", 0)) == (report["expected"]["kv"], report["expected"]["dkv"])
