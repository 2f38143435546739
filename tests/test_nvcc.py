"""Every gpu/*.cu compiles alone with nvcc for sm_80 and sm_90 (the wgmma kernels, fwd_sm90.cu and bwd_sm90.cu, for
sm_90a only), and the main forward and backward configurations do not spill.

Runs where nvcc is installed, GPU or not. Without nvcc it skips, except under CI=true, where a missing compiler
is a failure: CI must exercise the kernels' sources.
"""

import itertools
import os
import pathlib
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

GPU_DIR = pathlib.Path(__file__).resolve().parents[1] / "gpu"
ARCHS = ("sm_80", "sm_90")
ARCHS_OF = {"fwd_sm90.cu": ("sm_90a",), "bwd_sm90.cu": ("sm_90a",)}  # wgmma and setmaxnreg exist only on sm_90a

# Per source, the configurations to build (-D knobs) and whether ptxas must report no local-memory spills.
_FWD_MAIN = [  # the training tile and the single-token decode tile (key warps)
    ({"MASKATTN_DTYPE": dtype, "MASKATTN_HEAD_DIM": d, "MASKATTN_TILE_M": m, "MASKATTN_TILE_N": n,
      "MASKATTN_WARPS": w, "MASKATTN_STAGES": stages, "MASKATTN_MASK": mask}, True)
    for dtype, d, mask, (m, n, w, stages) in itertools.product(("half_t", "bf16_t"), (64, 128),
                                                               ("MASK_NONE", "MASK_INTERVALS", "MASK_BITS"),
                                                               ((128, 128, 8, 2), (16, 128, 8, 3)))
]
_FWD_OTHER = [
    ({"MASKATTN_DTYPE": "half_t", "MASKATTN_HEAD_DIM": d, "MASKATTN_TILE_M": 128, "MASKATTN_TILE_N": n,
      "MASKATTN_WARPS": w, "MASKATTN_MASK": "MASK_BITS"}, False)
    for d, n, w in ((32, 128, 8), (96, 128, 8), (192, 64, 8), (256, 64, 8), (64, 64, 4), (128, 64, 4))
] + [({"MASKATTN_DTYPE": "half_t", "MASKATTN_HEAD_DIM": d, "MASKATTN_TILE_M": 16, "MASKATTN_TILE_N": 128,
       "MASKATTN_WARPS": 8, "MASKATTN_STAGES": stages, "MASKATTN_MASK": "MASK_BITS"}, False)
     for d, stages in ((32, 3), (96, 3), (192, 2))]
_BWD_MAIN = [
    ({"MASKATTN_DTYPE": dtype, "MASKATTN_HEAD_DIM": d, "MASKATTN_TILE_M": 128, "MASKATTN_TILE_N": 128,
      "MASKATTN_MASK": mask}, True)
    for dtype, d, mask in itertools.product(("half_t", "bf16_t"), (64, 128),
                                            ("MASK_NONE", "MASK_INTERVALS", "MASK_BITS"))
]
_SM90 = [
    ({"MASKATTN_DTYPE": dtype, "MASKATTN_HEAD_DIM": d, "MASKATTN_MASK": mask}, True)
    for dtype, d, mask in itertools.product(("half_t", "bf16_t"), (64, 128),
                                            ("MASK_NONE", "MASK_INTERVALS", "MASK_BITS"))
]
_SM90_PADDED, _SM90_WIDE = ([  # head dims 32 and 96 (at the layouts of 64 and 128), and 192 and 256
    ({"MASKATTN_DTYPE": "bf16_t", "MASKATTN_HEAD_DIM": d, "MASKATTN_MASK": mask}, True)
    for d, mask in itertools.product(dims, ("MASK_NONE", "MASK_INTERVALS", "MASK_BITS"))
] for dims in ((32, 96), (192, 256)))
_SM90_TILE_192 = [  # fwd_sm90.cu's forward-only 192-row tile (three consumer warpgroups at 160 registers)
    ({"MASKATTN_DTYPE": dtype, "MASKATTN_HEAD_DIM": d, "MASKATTN_TILE_M": 192, "MASKATTN_MASK": mask}, True)
    for dtype, d, mask in itertools.product(("half_t", "bf16_t"), (32, 64),
                                            ("MASK_NONE", "MASK_INTERVALS", "MASK_BITS"))
]

_SM90_KEYS_112 = [  # fwd_sm90.cu's forward-only tiles of 112 keys: 192 x 112 at D = 96, 128 x 112 at 192
    ({"MASKATTN_DTYPE": "bf16_t", "MASKATTN_HEAD_DIM": d, "MASKATTN_TILE_M": m, "MASKATTN_TILE_N": 112,
      "MASKATTN_MASK": mask}, True)
    for (d, m), mask in itertools.product(((96, 192), (192, 128)), ("MASK_NONE", "MASK_INTERVALS", "MASK_BITS"))
]
_SM90_KEYS_176 = [  # D = 128's forward-only 128 x 176, for plans without partial tiles or a node order
    ({"MASKATTN_DTYPE": dtype, "MASKATTN_HEAD_DIM": 128, "MASKATTN_TILE_M": 128, "MASKATTN_TILE_N": 176,
      "MASKATTN_MASK": "MASK_NONE"}, True) for dtype in ("half_t", "bf16_t")
]
_SM90_KEYS_80 = [  # D = 256's forward-only 128 x 80, for plans without bit tiles or a node order
    ({"MASKATTN_DTYPE": dtype, "MASKATTN_HEAD_DIM": 256, "MASKATTN_TILE_M": 128, "MASKATTN_TILE_N": 80,
      "MASKATTN_MASK": mask}, True)
    for dtype, mask in itertools.product(("half_t", "bf16_t"), ("MASK_NONE", "MASK_INTERVALS"))
]


def _with_perm(config):
    """The instantiations for plans with a node order (MASKATTN_PERM) of one main configuration, with the payloads
    such plans carry: bits (reordered graphs) and intervals (dilated Longformer in residue order)."""
    return [({**config, "MASKATTN_MASK": mask, "MASKATTN_PERM": "true"}, True)
            for mask in ("MASK_INTERVALS", "MASK_BITS")]


_PERM, _BWD_PERM, _SM90_PERM, _SM90_PADDED_PERM, _SM90_WIDE_PERM, _SM90_TILE_192_PERM = (
    _with_perm(configs[-1][0]) for configs in (_FWD_MAIN, _BWD_MAIN, _SM90, _SM90_PADDED, _SM90_WIDE, _SM90_TILE_192))
_SM90_KEYS_112_PERM = [perm for config, _ in _SM90_KEYS_112 if config["MASKATTN_MASK"] == "MASK_BITS"
                       for perm in _with_perm(config)]
# bwd_sm90.cu's one pass, with the float32 and (MASKATTN_FIXED) the fixed-point dQ; its perm plans' producer spills
# up to 8 bytes at D = 256 (the register budgets in bwd_sm90.cu say why), the only spills allowed
_BWD_SM90 = [(config, no_spill) for config, no_spill in _SM90 + _SM90_PADDED + _SM90_WIDE + _SM90_PERM
             + _SM90_PADDED_PERM] + [(config, False) for config, _ in _SM90_WIDE_PERM]
CONFIGS = {"fwd.cu": _FWD_MAIN + _FWD_OTHER + _PERM, "bwd.cu": _BWD_MAIN + _BWD_PERM,
           "fwd_sm90.cu": (_SM90 + _SM90_PERM + _SM90_PADDED + _SM90_PADDED_PERM + _SM90_WIDE + _SM90_WIDE_PERM
                           + _SM90_TILE_192 + _SM90_TILE_192_PERM + _SM90_KEYS_112 + _SM90_KEYS_112_PERM
                           + _SM90_KEYS_176 + _SM90_KEYS_80),
           "bwd_sm90.cu": _BWD_SM90 + [({**config, "MASKATTN_FIXED": "true"}, no_spill)
                                       for config, no_spill in _BWD_SM90]}

_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def _nvcc():
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        if os.environ.get("CI") == "true":
            pytest.fail("nvcc is not on PATH; CI must compile the CUDA sources")
        pytest.skip("nvcc is not on PATH")
    return nvcc


def _jobs():
    jobs = []
    for source in sorted(GPU_DIR.glob("*.cu")):
        archs = ARCHS_OF.get(source.name, ARCHS)
        for arch, (defines, no_spill) in itertools.product(archs, CONFIGS.get(source.name, [({}, False)])):
            label = "-".join([source.stem, arch] + [str(v) for v in defines.values()])
            jobs.append(pytest.param(source, arch, defines, no_spill, id=label))
    return jobs


def nvcc_command(nvcc, source, arch, defines, output, out):
    """The nvcc command line of one job (scripts/same_cubins.py builds the same jobs): ``output`` is nvcc's output
    kind, -c (an object) or -cubin."""
    target = f"-gencode=arch=compute_{arch[3:]},code={arch}" if arch.endswith("a") else f"-arch={arch}"
    return [nvcc, target, "-std=c++17", "-Xptxas", "-v", output, "-DMASKATTN_INSTANTIATE",
            *(f"-D{k}={v}" for k, v in defines.items()), str(source), "-o", str(out)]


def _compile(nvcc, source, arch, defines, out_dir):
    cmd = nvcc_command(nvcc, source, arch, defines, "-c", out_dir / "out.o")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return " ".join(cmd), proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Every job compiled once, concurrently (nvcc is single-threaded): {(source, arch, knobs): result}."""
    nvcc = _nvcc()
    params = [p.values for p in _jobs()]

    # the directories are made here, not in the pool: pytest's temp factory is not thread-safe (its first use
    # races to create the base directory, which failed CI once)
    out_dirs = [tmp_path_factory.mktemp("nvcc") for _ in params]

    def run(job, out_dir):
        source, arch, defines, _ = job
        return _compile(nvcc, source, arch, defines, out_dir)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(run, params, out_dirs))
    return {(p[0], p[1], tuple(p[2].items())): r for p, r in zip(params, results)}


def test_sources_found():
    assert (GPU_DIR / "fwd.cu").is_file(), f"no fwd.cu under {GPU_DIR}"


@pytest.mark.parametrize("source, arch, defines, no_spill", _jobs())
def test_compiles(compiled, source, arch, defines, no_spill):
    cmd, rc, log = compiled[(source, arch, tuple(defines.items()))]
    assert rc == 0, f"{cmd}\n{log}"
    reports = _SPILL.findall(log)
    assert reports, f"no ptxas resource report in:\n{log}"
    if no_spill:
        spills = [(int(s), int(l)) for s, l in reports if int(s) or int(l)]
        assert not spills, f"local-memory spills {spills} in {cmd}\n{log}"
    # where registers a product in flight uses are touched between products (in bwd_sm90.cu once a branch on the
    # thread), ptxas serializes the wgmma products, with only this warning to say so (the one-pass backward ran 1.1-1.3x
    # slower at D = 64: docs/performance.md, 2026-11-27)
    assert "warpgroup.arrive is injected" not in log and "wgmma.mma_async instructions are serialized" not in log, (
        f"ptxas serialized wgmma in {cmd}\n{log}")
