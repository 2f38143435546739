"""The fast CPU backend: maskprep's C++ kernels over a compiled block plan, forward and backward.

NumPy (and CPU DLPack) inputs run here by default. The kernels (``maskattn._maskprep.attention``, from
``maskprep/attention_kernels.hpp``) walk the plan as :mod:`.reference` does and compute the same thing, exact up to
rounding in the input dtype (float32 or float64), but tile by tile in registers: K and V packed once per call, every
product a register-tiled kernel for the widest instruction set the CPU has (AVX-512, AVX2 + FMA, or plain 16-byte
vectors), a vectorised exp2, the GIL released and the work shared by threads. Like the reference they never form an
``n_q x n_k`` matrix: besides inputs and outputs they hold packed copies of the operands and a few tiles per thread.

:mod:`.reference` stays the ground truth the tests hold this backend (and the GPU kernels) to. ``MASKATTN_CPU_BACKEND=
reference`` makes the API run NumPy inputs on it instead (:func:`chosen`).

Threads: ``threads=`` where given, else ``MASKATTN_NUM_THREADS``, else ``OMP_NUM_THREADS`` (the variable BLAS
libraries read), else the CPUs this process may run on.
"""

from __future__ import annotations

import os
import sys

from .._maskprep import attention as _kernels
from . import reference

# The tile NumPy calls compile their masks for. On a 2-core AVX-512 machine (docs/performance.md, "CPU backend")
# 128 x 128 ran dense and causal masks 10-15% faster than 64 x 64, which computes fewer masked pairs on the edges of
# sparse masks (BigBird's 64-token blocks, documents) but pays more per tile.
TILE = (128, 128)


def chosen():
    """The module the API runs NumPy inputs on: this one, or :mod:`.reference` where the environment variable
    ``MASKATTN_CPU_BACKEND`` is ``reference`` (read at every call)."""
    name = os.environ.get("MASKATTN_CPU_BACKEND", "fast")
    if name == "reference":
        return reference
    if name != "fast":
        raise ValueError(f"MASKATTN_CPU_BACKEND must be 'fast' or 'reference'; got {name!r}")
    return sys.modules[__name__]


def threads() -> int:
    """Worker threads of a call without ``threads=``: MASKATTN_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs this
    process may run on."""
    for name in ("MASKATTN_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if value:
            try:
                return max(1, int(value.split(",")[0]))
            except ValueError:
                raise ValueError(f"{name} must be a positive integer; got {value!r}") from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def element_lists(plan, ordered: bool = True):
    """The element path's lists of ``plan`` (``maskattn._maskprep.attention.element_lists``: its bit tiles decoded,
    where a block's tiles are mostly masked; ``ordered``: in an execution order where they may be), made on first use
    and kept with the plan's device copies (a plan never changes); None where no block takes that path."""
    cache, key = plan._device_cache, ("cpu", ordered)
    if key not in cache:
        cache[key] = _kernels.element_lists(plan, ordered=ordered) if plan.payload == "bits" else None
    return cache[key]


def forward(q, k, v, plan, scale: float, key_lens=None, *, check_finite: bool = False, threads: int | None = None,
            isa: str | None = None):
    """Exact masked attention over ``plan``; the signature and results of :func:`.reference.forward`.

    Parameters
    ----------
    q, k, v, plan, scale, key_lens, check_finite :
        As :func:`.reference.forward` takes them (q (B, H, n_q, D), k and v (B, Hk, n_k, D), float32 or float64,
        any strides; a plan for any tile). The kernels check each element for inf and NaN as they read it.
    threads : int, optional
        Worker threads (default: :func:`threads`).
    isa : {None, "generic", "avx2", "avx512"}
        The kernels' instruction set (default: the widest this CPU runs).

    Returns
    -------
    out : (B, H, n_q, D) array of q's dtype, C-contiguous
    lse : (B, H, n_q) array of q's dtype (natural log; -inf on rows that see no key)
    """
    return _kernels.attention_forward(q, k, v, plan, float(scale), key_lens, threads=_threads(threads), isa=isa,
                                      lists=element_lists(plan, ordered=key_lens is None), check_finite=check_finite)


def backward(do, q, k, v, out, lse, plan, scale: float, *, check_finite: bool = False, threads: int | None = None,
             isa: str | None = None):
    """Gradients of :func:`forward` with respect to q, k and v; the signature and results of
    :func:`.reference.backward` (dk, dv summed over the query heads of a KV head).

    Deterministic: the same inputs and ``threads`` give the same bits on every run (with fewer than 8 (batch, head)
    pairs a thread, dq is summed over ranges of key blocks whose number follows ``threads``).
    """
    return _kernels.attention_backward(do, q, k, v, out, lse, plan, float(scale), threads=_threads(threads), isa=isa,
                                       lists=element_lists(plan), check_finite=check_finite)


def _threads(given) -> int:
    return threads() if given is None else max(1, int(given))
