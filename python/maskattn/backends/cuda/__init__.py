"""The CUDA backend: block-sparse flash attention on CuPy arrays (and, through ``maskattn.api``, any CUDA DLPack
tensor).

- :mod:`.kernels`: configurations (:func:`tile_for`) and the kernels' compilation (NVRTC through CuPy, sm_90a
  directly);
- :mod:`.plans`: plans on the device (the one-copy upload; dense GPU masks planned there end to end);
- :mod:`.launch`: the checks and the launcher every launch shares;
- :mod:`.fwd`, :mod:`.bwd`: the typed entry points and their cached launches;
- :mod:`.io`: what a prepared call does to CuPy arrays and torch tensors.

Inputs are CuPy arrays in logical "bhnd" order, possibly strided views (``docs/internals.md``). CuPy is imported on
first use, so ``maskattn`` imports without it.
"""

from .bwd import backward, backward_launch
from .fwd import forward, forward_launch, num_splits_for, tail_splits_for
from .kernels import DECODE_ROWS, HEAD_DIMS, MAX_SPLITS, tile_for
from .plans import dense_plan, device_plan, wrap_dense_plan

__all__ = ["HEAD_DIMS", "DECODE_ROWS", "MAX_SPLITS", "tile_for", "device_plan", "dense_plan", "wrap_dense_plan",
           "num_splits_for", "tail_splits_for", "forward", "forward_launch", "backward", "backward_launch"]
