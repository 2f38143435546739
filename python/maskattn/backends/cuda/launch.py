"""CUDA backend: what every kernel launch shares. The checks of arrays, plan and tile against the kernels
(:func:`check_launch`, :func:`element_strides`) that CuPy would pass blindly, and :class:`Launcher`, a kernel with its
fixed arguments converted once.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ...plan import BlockMask
from .kernels import (check_head_dim, forward_only_tiles, import_cupy, kernel_type, sm90_forward_tile,
                      sm90_forward_tile_takes, tile_for)


def element_strides(x, name: str, gathered: bool = False) -> tuple[int, int, int]:
    """Batch, head and row strides of a (B, H, n, D) CuPy view in elements, after the checks cp.async needs;
    ``gathered``: the rows are gathered through a plan's node order, whose row offsets the Hopper kernels compute
    with a 32-bit stride."""
    item = x.dtype.itemsize
    if x.strides[3] != item:
        raise ValueError(f"{name} must be contiguous in its last dimension; got strides {x.strides} (bytes)")
    if x.data.ptr % 16:
        raise ValueError(f"{name} must start on a 16-byte boundary; its data pointer is {x.data.ptr:#x}")
    for axis, s in zip("bhn", x.strides[:3]):
        if s % 16:
            raise ValueError(f"{name}'s {axis} stride is {s} bytes; strides must be multiples of 16 bytes")
    strides = tuple(s // item for s in x.strides[:3])
    if gathered and strides[2] >= 2 ** 31:
        raise ValueError(f"{name}'s row stride is {strides[2]} elements; plans with a node order (perm) gather rows "
                         f"with strides below 2**31 elements: pass a contiguous copy")
    return strides


def check_launch(plan: BlockMask, scale: float, q, k, v, *, pack: int = 1, forward: bool = False, **more):
    """The checks every attention launch shares; returns (kernel dtype, tile, scale as float).

    q (B, H, n_q, D), k and v (B, Hk, n_k, D) and the named extra arrays (None skipped; their shapes are the
    caller's to check) must be 4-d CuPy arrays of q's dtype on q's device; H % Hk == 0; the plan must fit the
    shapes (its rows n_q * pack: GQA packing) and carry the kernel's tile (``forward``: the forward-only tiles,
    kernels.forward_only_tiles, are accepted too); the grid dimensions must fit.
    """
    cupy = import_cupy()
    arrays = {"q": q, "k": k, "v": v, **{name: x for name, x in more.items() if x is not None}}
    for name, x in arrays.items():
        if not isinstance(x, cupy.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray; got {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(f"{name} must have shape (B, H, n, D); got {x.shape}")
        if x.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {x.dtype}; q has {q.dtype}")
        if x.device.id != q.device.id:
            raise ValueError(f"{name} is on device {x.device.id}; q is on device {q.device.id}")
    ctype = kernel_type(q.dtype)
    B, H, n_q, D = q.shape
    _, Hk, n_k, _ = k.shape
    head_dim = check_head_dim(D)
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"k and v must have shape (B={B}, Hk, n_k, D={D}); got k {k.shape}, v {v.shape}")
    if Hk == 0 or H % Hk:
        raise ValueError(f"q has {H} heads, not a multiple of k's {Hk}")
    if not isinstance(plan, BlockMask):
        raise TypeError(f"plan must be a BlockMask; got {type(plan).__name__}")
    B_mask, H_mask, pn_q, pn_k = plan.shape
    if pack > 1 and (H // Hk) % pack:
        raise ValueError(f"pack={pack} must divide the {H // Hk} query heads per KV head")
    if (pn_q, pn_k) != (n_q * pack, n_k) or B_mask not in (1, B) or H_mask not in (1, 1 if pack > 1 else H):
        need = f"(1 or {B}, 1, {n_q} * pack={pack}, {n_k})" if pack > 1 else f"(1 or {B}, 1 or {H}, {n_q}, {n_k})"
        raise ValueError(f"the plan has shape {plan.shape}; attention needs {need}")
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be positive and finite; got {scale}")
    if max(plan.n_mblocks, plan.n_nblocks, B * H) > 65535:
        raise ValueError(f"the grid allows 65535 query blocks, key blocks and B * H; got {plan.n_mblocks}, "
                         f"{plan.n_nblocks} and {B * H}")
    tile = tile_for(head_dim, q.dtype, device=q.device.id)
    forward_tiles = forward_only_tiles(head_dim, q.device.id) if forward else ()
    if plan.tile != tile and plan.tile not in forward_tiles:
        also = f" (or {', '.join(map(str, forward_tiles))}, forward only)" if forward else ""
        raise ValueError(f"the plan was compiled for tile {plan.tile}; the kernels for head_dim {head_dim} and "
                         f"{q.dtype} use {tile}{also}: compile_mask(spec, tile=tile_for(head_dim, dtype))")
    if plan.tile != tile and plan.tile == sm90_forward_tile(head_dim, q.device.id) and not sm90_forward_tile_takes(
            head_dim, plan):
        order = " and a node order" if plan.perm is not None else ""
        raise ValueError(f"at head_dim {head_dim} the forward-only tile {plan.tile} does not take this plan (payload "
                         f"{plan.payload!r}{order}; kernels.sm90_forward_tile_takes); compile this mask for {tile}: "
                         "compile_mask(spec, tile=tile_for(head_dim, dtype))")
    return ctype, plan.tile, scale


class Launcher:
    """One kernel with every argument but its leading arrays fixed, launched through cuLaunchKernel: CuPy's launch
    converts each argument (about 1 us apiece; the forward has 36), here the fixed ones are converted once.

    fixed: NumPy int64 / int32 / float32 scalars, CuPy arrays (passed as pointers: they must outlive the launcher;
    the plan's are cached on the plan) or None (a null pointer), in the kernel's parameter order after the arrays.
    Calls take the stream and the leading arrays' device addresses (0 for a null pointer).
    """

    _CTYPES = {np.dtype(np.int64): ctypes.c_int64, np.dtype(np.int32): ctypes.c_int32,
               np.dtype(np.float32): ctypes.c_float}

    def __init__(self, kernel, grid, block, smem, n_arrays, fixed):
        from cupy.cuda import driver

        self.launch_kernel = driver.launchKernel
        self.function = getattr(kernel, "kernel", kernel).ptr  # a RawKernel's Function on the current device
        self.dims = (*grid, *block, smem)
        self.n_arrays = n_arrays
        self.fixed = [self._slot(x) for x in fixed]  # the storage the parameter pointers point into
        self.fixed_addresses = [ctypes.addressof(x) for x in self.fixed]
        self.params = ctypes.c_void_p * (n_arrays + len(fixed))
        self.pointers = ctypes.c_uint64 * n_arrays

    def _slot(self, x):
        if x is None:
            return ctypes.c_uint64(0)
        if isinstance(x, np.generic):
            return self._CTYPES[x.dtype](x.item())
        if isinstance(x, ctypes.Array):  # passed by value from this storage, which its owner may rewrite between calls
            return x
        return ctypes.c_uint64(x.data.ptr)

    def move_pointers(self, lo: int, hi: int, to: int):
        """Fixed pointer arguments into device memory [lo, hi) point as far into the memory at ``to`` instead: a launch
        prepared over one plan's buffer runs over another buffer laid out alike."""
        for slot in self.fixed:
            if isinstance(slot, ctypes.c_uint64) and lo <= slot.value < hi:
                slot.value += to - lo

    def __call__(self, stream: int, *addresses: int):
        pointers = self.pointers(*addresses)
        base = ctypes.addressof(pointers)
        params = self.params(*range(base, base + 8 * self.n_arrays, 8), *self.fixed_addresses)
        self.launch_kernel(self.function, *self.dims, stream, ctypes.addressof(params), 0)
