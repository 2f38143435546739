"""The machine code of one kernel instantiation, compiled here (no GPU needed), reduced to the instructions that
decide what overlaps what: the tensor-core products (HGMMA), their waits (WARPGROUP.DEPBAR), the exponentials
(MUFU.EX2), barriers, mbarrier operations, fences and branches, with repeats folded ("64 MUFU.EX2").

    python3 scripts/sass.py fwd_sm90.cu MASKATTN_HEAD_DIM=64 [MASKATTN_MASK=MASK_BITS ...] [--full]

The knobs are the -D defines of the source's standalone instantiation (tests/test_nvcc.py builds the same ones);
--full prints the whole disassembly instead. Needs nvcc and nvdisasm: a CUDA toolkit's, or PyPI's
``nvidia-cuda-nvdisasm`` (``pip install nvidia-cuda-nvdisasm``; its binary lies under nvidia/cu13/bin of the
site-packages). What it showed first: ptxas moves a wgmma wait to the top of its basic block, above instructions
that come before it in the source (docs/performance.md, 2026-11-27).
"""

import argparse
import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHOWN = re.compile(r"HGMMA|WARPGROUP\.(DEPBAR|ARRIVE)|MUFU\.EX2|\bBAR\.|SYNCS\.|MEMBAR|FENCE|VOTE|BRA\b|EXIT|STL|LDL")
LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def nvdisasm() -> str:
    found = shutil.which("nvdisasm")
    if found:
        return found
    spec = importlib.util.find_spec("nvidia")
    for folder in spec.submodule_search_locations if spec else []:
        for candidate in pathlib.Path(folder).glob("cu*/bin/nvdisasm"):
            return str(candidate)
    sys.exit("nvdisasm not found: install a CUDA toolkit or `pip install nvidia-cuda-nvdisasm`")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="a file of gpu/, e.g. fwd_sm90.cu, or the path of one elsewhere")
    parser.add_argument("defines", nargs="*", help="NAME=VALUE knobs of the instantiation")
    parser.add_argument("--full", action="store_true", help="print the whole disassembly")
    args = parser.parse_args()
    nvcc = shutil.which("nvcc") or sys.exit("nvcc is not on PATH")
    source = pathlib.Path(args.source) if pathlib.Path(args.source).is_file() else ROOT / "gpu" / args.source
    arch = "sm_90a" if source.name.endswith("_sm90.cu") else "sm_90"
    target = f"-gencode=arch=compute_{arch[3:]},code={arch}" if arch.endswith("a") else f"-arch={arch}"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = pathlib.Path(tmp) / "k.cubin"
        built = subprocess.run([nvcc, target, "-std=c++17", "-Xptxas", "-v", "-cubin", "-DMASKATTN_INSTANTIATE",
                                *(f"-D{d}" for d in args.defines), str(source), "-o", str(cubin)],
                               capture_output=True, text=True)
        if built.returncode != 0:
            sys.exit(built.stderr)
        for line in built.stderr.splitlines():
            if "registers" in line or "spill" in line:
                print(line.strip())
        sass = subprocess.run([nvdisasm(), "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    if args.full:
        print(sass)
        return
    folded = []  # [count, address of the first, instruction without its operands]
    for line in sass.splitlines():
        match = LINE.match(line)
        if not match or not SHOWN.search(match.group(2)):
            continue
        words = match.group(2).split()
        op = " ".join(words[:2] if words[0].startswith("@") else words[:1])
        if folded and folded[-1][2] == op:
            folded[-1][0] += 1
        else:
            folded.append([1, match.group(1), op])
    for count, address, op in folded:
        print(f"{address} {count:4d} {op}")


if __name__ == "__main__":
    main()
