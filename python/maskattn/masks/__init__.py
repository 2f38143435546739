"""Mask specs: small immutable descriptions of attention masks, and their builders.

A spec knows its shape ``(B, H, n_q, n_k)`` (B and H are 1 where the mask is shared across the batch or the
heads), expands itself to a dense boolean array (``to_dense()``, True = attend) and compiles to a block plan
(``maskattn.compile_mask``). Interval-expressible masks (causal, windows, sinks, documents, prefix-LM, shared
question, interleaved, Longformer) are :class:`IntervalMask` (``intervals``): O(n) memory, and the kernels mask
partial tiles from the intervals. The rest carry bits: :class:`DenseMask` (``dense``), :class:`GraphMask`
(``graph``, with its node orderings in ``reorder``), :class:`FunctionMask` (``patterns``).

This layer knows no plan, backend or framework: it imports only the host compiler (``maskattn._maskprep``) and the
array ingestion (``maskattn._arrays``).
"""

from .base import MaskSpec
from .dense import DenseMask, TreeMask, from_dense, medusa_tree
from .graph import GraphMask, from_graph
from .intervals import (IntervalMask, causal, document, from_intervals, full, interleaved, kv_cache, longformer,
                        shared_question, sliding_window)
from .patterns import FunctionMask, bigbird, coarse_support, from_function
from .stack import stack

__all__ = [
    "MaskSpec", "IntervalMask", "DenseMask", "GraphMask", "FunctionMask", "TreeMask",
    "causal", "sliding_window", "document", "shared_question", "interleaved", "longformer", "bigbird",
    "medusa_tree", "from_intervals", "from_dense", "from_graph", "from_function", "stack", "full",
    "coarse_support", "kv_cache",
]
