"""Whether the kernels compile to the same machine code as at a git ref: every nvcc job of tests/test_nvcc.py (each
gpu/*.cu alone, for each architecture and configuration) built to a cubin from this tree and from the ref's gpu/,
and the bytes compared. Runs on the host (nvcc, no GPU).

A refactor of the kernel sources (shared parameter lists, helpers) that leaves every cubin byte-identical changes
nothing a GPU could observe, so it needs no device run; anything else does.

    python3 scripts/same_cubins.py [REF]       # REF defaults to HEAD; exit status 1 if any cubin differs
"""
import io
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import test_nvcc  # noqa: E402  (the job list and its nvcc command lines)


def cubin(nvcc, gpu_dir, job, out):
    """The cubin's bytes, or None where the sources do not build the job (a configuration newer than the ref)."""
    source, arch, defines, _ = job
    proc = subprocess.run(test_nvcc.nvcc_command(nvcc, gpu_dir / source.name, arch, defines, "-cubin", out),
                          capture_output=True)
    return out.read_bytes() if proc.returncode == 0 else None


def main(ref="HEAD"):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        sys.exit("nvcc is not on PATH")
    jobs = [p.values for p in test_nvcc._jobs()]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "gpu"], check=True, capture_output=True)
        tarfile.open(fileobj=io.BytesIO(archive.stdout)).extractall(tmp / "ref", filter="data")
        tasks = [(gpu_dir, job, tmp / f"{side}_{i}.cubin") for i, job in enumerate(jobs)
                 for side, gpu_dir in (("ref", tmp / "ref" / "gpu"), ("tree", ROOT / "gpu"))]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            binaries = list(pool.map(lambda t: cubin(nvcc, *t), tasks))
    pairs = list(zip(jobs, binaries[::2], binaries[1::2]))
    for (source, arch, defines, _), ref_bin, tree_bin in pairs:
        if tree_bin is None:
            print(f"does not build in the tree: {source.name} {arch} {defines}")
        elif ref_bin is None:
            print(f"new (does not build at {ref}): {source.name} {arch} {defines}")
    old = [(job, ref_bin, tree_bin) for job, ref_bin, tree_bin in pairs if ref_bin is not None]
    differ = [job for job, ref_bin, tree_bin in old if ref_bin != tree_bin]
    for source, arch, defines, _ in differ:
        print(f"differs: {source.name} {arch} {defines}")
    print(f"{len(old) - len(differ)} of the {len(old)} cubins that {ref} builds are identical")
    return 1 if differ or any(tree_bin is None for _, _, tree_bin in pairs) else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
