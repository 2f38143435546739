"""maskattn: exact attention for arbitrary masks at the speed of the mask's real work.

Describe a mask once (``maskattn.masks``), compile it into a block plan in microseconds (``compile_mask``) and
run attention over only the tiles it lists (``attention``, ``attention_backward``) on NumPy (exact CPU
reference), CuPy or DLPack tensors such as torch (CUDA kernels). ``maskattn.torch`` is the autograd op,
``maskattn.flex`` moves block masks to and from FlexAttention.

The package is built in layers, each importing only the ones below it (``docs/internals.md``; ``tests/test_layers.py``
holds them): ``masks`` -> ``plan`` -> ``backends`` -> ``api`` -> ``torch``, ``flex`` -> ``testing``, ``bench``.
"""

from . import flex, masks
from .api import attention, attention_backward, compile_mask
from .plan import BlockMask

__all__ = ["masks", "BlockMask", "compile_mask", "attention", "attention_backward", "flex"]
__version__ = "0.1.0"


def __getattr__(name):
    # torch is optional and heavy: import the bridge on first use only
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'maskattn' has no attribute {name!r}")
