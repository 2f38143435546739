"""The attention bench's bookkeeping on the CPU: peers called as their users call them, timings and refusals kept
per peer and phase, the fastest peer and maskattn's ratio to it, the tables, and the command line."""

import json
import pathlib

import pytest

from maskattn import __main__ as cli
from maskattn.bench import attention, common, peers

torch = pytest.importorskip("torch")
F = torch.nn.functional

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_short_reason_finds_the_refusal_inside_compile_wrappers():
    class Wrapper(Exception):  # as torch's InductorError: the inner exception kept as an attribute
        def __init__(self, inner):
            super().__init__("backend='inductor' raised:")
            self.inner_exception = inner

    refusal = ValueError("Block sparsity expects sparse_block_size[1] to be a multiple of tile_n=80; got 128.\nmore")
    try:
        try:
            raise Wrapper(refusal)
        except Wrapper as err:
            raise RuntimeError("compile failed") from err
    except RuntimeError as err:
        reason = common.short_reason(err)
    assert reason == "ValueError: Block sparsity expects sparse_block_size[1] to be a multiple of tile_n=80; got 128."
    assert common.short_reason(RuntimeError("outer"), limit=8) == "Runti..."
    try:
        raise RuntimeError("outer") from AssertionError()
    except RuntimeError as err:
        assert common.short_reason(err) == "RuntimeError: outer"  # an empty inner message says nothing
    assert common.attempt(lambda: 3) == (3, None)
    assert common.attempt(lambda: [][0]) == (None, "IndexError: list index out of range")


def _fake_libraries(calls):
    """A compiled flex_attention and an FA4 flash_attn_func of the right signatures, computed by SDPA's math."""
    def flex(q, k, v, block_mask=None, kernel_options=None):
        calls.append(("flex", kernel_options))
        return F.scaled_dot_product_attention(q, k, v, is_causal=block_mask == "causal")

    def fa4(q, k, v, causal=False):
        calls.append(("fa4", q.shape))
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
        return out.transpose(1, 2), None

    return flex, fa4


@pytest.mark.parametrize("workload", ["full", "causal", "doc_causal"])
def test_peers_compute_the_workload_and_time_or_say_why_not(workload, monkeypatch):
    monkeypatch.setattr(common, "turns_ms", _calls_each)
    calls = []
    flex, fa4 = _fake_libraries(calls)
    B, H, n, D = 1, 2, 24, 16
    gen = torch.Generator().manual_seed(0)
    inputs = [tuple(torch.randn(B, H, n, D, generator=gen) for _ in range(4))]
    ref = F.scaled_dot_product_attention(*inputs[0][:3], is_causal=workload != "full")
    expected = {"full": set(peers.PEERS), "causal": set(peers.PEERS), "doc_causal": {"flex", "flex_flash"}}[workload]
    mask = "causal" if workload != "full" else None
    row, turns = {"reasons": {}}, {phase: {} for phase in attention.PHASES}
    outs = {key: attention.time_peer(row, key, attn, inputs=inputs, backward=True, turns=turns)
            for key, attn in peers.peer_calls(workload, flex, mask, fa4).items()}
    attention.time_turns(row, turns)
    for key, out in outs.items():
        for phase in attention.PHASES:  # every phase timed, or refused with a reason (cuDNN has no CPU kernel)
            assert (row[f"{key}_{phase}_ms"] == 1.5) != (f"{key}_{phase}" in row["reasons"])
        if out is not None and key != "flex":  # the fake flex is causal wherever a block mask is given
            torch.testing.assert_close(out, ref)
    assert {key.rsplit("_", 2)[0] for key in row if key.endswith("_ms")} == expected
    assert ("flex", peers.FLASH) in calls and ("flex", None) in calls
    assert all(shape == (B, n, H, D) for name, shape in calls if name == "fa4")
    assert all(reason.startswith("RuntimeError") for key, reason in row["reasons"].items())


def _calls_each(fns):
    """turns_ms on the CPU: each callable called once, 1.5 ms each."""
    return {name: (fn(), 1.5)[1] for name, fn in fns.items()}


def test_a_failing_first_call_stands_for_every_phase(monkeypatch):
    monkeypatch.setattr(common, "turns_ms", lambda fns: pytest.fail("a refused peer was timed"))
    row, turns = {"reasons": {}}, {phase: {} for phase in attention.PHASES}

    def refuses(q, k, v):
        raise ValueError("sparse_block_size[1] must be a multiple of tile_n=80")

    x = torch.zeros(1, 1, 4, 8)
    assert attention.time_peer(row, "flex_flash", refuses, inputs=[(x, x, x, x)], backward=True, turns=turns) is None
    attention.time_turns(row, turns)
    assert row["flex_flash_fwd_ms"] is None and row["flex_flash_fwdbwd_ms"] is None
    assert row["reasons"]["flex_flash_fwdbwd"] == "ValueError: sparse_block_size[1] must be a multiple of tile_n=80"


def test_a_side_failing_in_turns_keeps_the_others_times_in_turns(monkeypatch):
    timed = []  # the sides of each timer call

    def calls_each(fns):
        timed.append(set(fns))
        return _calls_each(fns)

    monkeypatch.setattr(common, "turns_ms", calls_each)
    row = {"reasons": {}}

    def fails():
        raise RuntimeError("CUDA out of memory")

    attention.time_turns(row, {"fwd": {"maskattn": lambda: None, "fa4": fails, "flex": lambda: None}, "fwdbwd": {}})
    assert row["maskattn_fwd_ms"] == row["flex_fwd_ms"] == 1.5 and row["fa4_fwd_ms"] is None
    assert row["reasons"] == {"fa4_fwd": "RuntimeError: CUDA out of memory"}
    assert timed[-1] == {"maskattn", "flex"}  # the survivors timed together again, not one after another


def test_graphs_take_every_input_set_in_turns(monkeypatch):
    monkeypatch.setattr(common, "turns_ms", lambda fns: pytest.fail("--graph timed outside graphs"))
    seen = {}

    def graphs(sides):
        seen.update(sides)
        return {key: 2.5 for key in sides}

    monkeypatch.setattr(common, "graphs_ms", graphs)
    sets = [tuple(torch.full((1, 1, 4, 8), float(i)) for _ in range(4)) for i in range(3)]
    row, turns = {"reasons": {}}, {phase: {} for phase in attention.PHASES}
    for key in ("maskattn", "flex"):
        attention.time_peer(row, key, F.scaled_dot_product_attention, inputs=sets, turns=turns, graph=True)
    attention.time_turns(row, turns, graph=True)
    assert row["maskattn_fwd_ms"] == row["flex_fwd_ms"] == 2.5 and "maskattn_fwdbwd_ms" not in row
    assert set(seen) == {"maskattn", "flex"} and all(len(calls) == len(sets) for calls in seen.values())
    assert [float(call()[0, 0, 0, 0]) for call in seen["flex"]] == [0.0, 1.0, 2.0]  # one call per input set


def _row(**times):
    row = {"n": 8192, "workload": "full", "density": 1.0, "active": 4096, "total": 4096, "fwd_flops": 2e12,
           "maskattn_compile_ms": 0.05, "reasons": {"flex_flash_fwd": "ValueError: a|b", "flex_flash_fwdbwd": "x"},
           "timer": "graph", "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "fa4": "4.0.0b36",
           "peers": list(peers.PEERS), "flex_flash_fwd_ms": None, "flex_flash_fwdbwd_ms": None}
    row.update({f"{key}_ms": ms for key, ms in times.items()})
    return row


def test_best_peer_ratio_and_tables():
    row = _row(maskattn_fwd=4.0, flex_fwd=5.0, fa4_fwd=3.2, cudnn_fwd=3.6, sdpa_flash_fwd=6.0,
               maskattn_fwdbwd=16.0, flex_fwdbwd=18.0, fa4_fwdbwd=12.0, sdpa_mask_fwd=7.0)
    assert attention.best_peer(row, "fwd") == ("fa4", 3.2)
    assert attention.best_peer(row, "fwdbwd") == ("fa4", 12.0)
    assert attention.best_peer({"maskattn_fwd_ms": 1.0}, "fwd") == (None, None)
    assert attention.tflops(row, "maskattn") == pytest.approx(500)
    assert attention.tflops(row, "maskattn", "fwdbwd") == pytest.approx(3.5 * 2e12 / 16e9)
    table = attention.markdown([row], backward=True)
    lines = table.splitlines()
    assert "CUDA graphs" in lines[0] and "torch 2.11.0" in lines[0] and "FA4 4.0.0b36" in lines[0]
    tables = "\n".join(line if line.startswith("|") else "" for line in lines).split("\n\n")
    for rows in filter(None, (t.strip().splitlines() for t in tables)):  # every row has its header's cells
        assert len({line.replace("\\|", "").count("|") for line in rows}) == 1
    assert len([t for t in tables if t.strip()]) == 3
    fwd = next(line for line in lines if line.startswith("| 8192 | full | 4.000"))
    cells = [c.strip() for c in fwd.split(" | ")]
    assert cells[5:10] == ["5.000", "fail", "3.200", "3.600", "6.000"]
    assert cells[10:13] == ["FA4", "625", "1.25"]
    assert "Flex FLASH: ValueError: a\\|b" in fwd
    fwdbwd = [line for line in lines if line.startswith("| 8192 | full | 16.000")]
    assert len(fwdbwd) == 1 and "| FA4 | 583 | 1.33 | Flex FLASH: x |" in fwdbwd[0]
    assert "Forward+backward, against every peer:" in table
    assert "Forward+backward, against" not in attention.markdown([row], backward=False)


def test_tables_of_earlier_runs_join(tmp_path, capsys):
    old = json.loads((ROOT / "docs" / "bench" / "h100_d128.json").read_text())[:2]  # before the peers came
    new = _row(maskattn_fwd=1.0, flex_fwd=1.1, maskattn_fwdbwd=4.0, flex_fwdbwd=4.2)
    new.update(errors=[])
    for i, rows in enumerate((old, [new])):
        (tmp_path / f"{i}.json").write_text(json.dumps(rows))
    out = tmp_path / "out"
    assert cli.main(["bench", "--tables", str(tmp_path / "0.json"), str(tmp_path / "1.json"), "--out", str(out)]) == 0
    table = (out / "bench.md").read_text()
    assert table.strip() == capsys.readouterr().out.strip()
    assert table.count("| 8192 | full |") == 3 * 2  # old and new rows in the first table and in each peer table
    assert "Flex Triton" in table and "| 8192 | causal |" in table
    assert json.loads((out / "bench.json").read_text())[-1]["workload"] == "full"


def test_command_line():
    import argparse

    from maskattn import bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args([])
    assert args.peers == list(peers.PEERS) and not args.graph and args.tables is None
    args = parser.parse_args(["--peers", "fa4", "flex_flash", "--graph", "--backward", "--n", "8192"])
    assert args.peers == ["fa4", "flex_flash"] and args.graph and args.backward
    assert parser.parse_args(["--peers"]).peers == []
    with pytest.raises(SystemExit):
        parser.parse_args(["--peers", "flash2"])


def test_sdpa_table_has_a_cell_per_column(capsys):
    """bench --sdpa's row and table: every header has its cell, with or without the forward+backward's timings."""
    from maskattn.bench import sdpa

    row = {"n": 1024, "workload": "causal", "partial": 8, "density": 0.5, "plan_ms": 0.1, "plan_gpu_ms": 0.05,
           "wrapper_host_ms": 0.2, "sdpa_fwd_ms": 2.0, "wrapper_fwd_ms": 0.6, "precompiled_fwd_ms": 0.5,
           "host_plan_fwd_ms": 0.5, "rel_err_vs_sdpa": 1e-4, "errors": []}
    backward = dict(row, sdpa_fwdbwd_ms=6.0, wrapper_fwdbwd_ms=2.2, precompiled_fwdbwd_ms=2.0,
                    wrapper_step_host_ms=0.9)
    for r in (row, backward):
        sdpa.print_row(r)
        head, rule, line = sdpa.markdown([r]).splitlines()
        assert head.count("|") == line.count("|") == rule.count("|")
    assert "wrapper host fwd+bwd 0.900 ms" in capsys.readouterr().out
    assert line.endswith("| 1.10 | 0.367 | 0.900 |")
