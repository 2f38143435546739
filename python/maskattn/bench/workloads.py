"""The benchmark workloads of ``WORKLOADS.md``: seeded mask specs of n tokens, shared by the demo, the bench
and the asv suite.

>>> from maskattn.bench import workloads
>>> spec = workloads.build("doc_causal", 4096, seed=0)
>>> spec.shape
(1, 1, 4096, 4096)
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import masks

NAMES = ("full", "causal", "swa", "sink_swa", "doc_causal", "doc_prefix", "shared_question", "vlm",
         "lf_dilated", "lf_global", "bigbird", "graph", "graph_rcm", "medusa")
# by the payload of their plans (lf_dilated: intervals in residue order, through the plan's perm)
INTERVAL_NAMES = ("causal", "swa", "sink_swa", "doc_causal", "doc_prefix", "shared_question", "vlm", "lf_dilated",
                  "lf_global")
BITS_NAMES = ("bigbird", "graph", "graph_rcm", "medusa")
MEDUSA_PREFIX = 4096


# Medusa's default tree for Vicuna-7B (medusa/model/medusa_choices.py): 63 candidates, 64 tree tokens with the root
MC_SIM_7B_63 = [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5], [0, 0, 1],
    [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9], [8], [9], [1, 0, 0],
    [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0], [0, 1, 1], [0, 0, 6],
    [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2],
    [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1],
    [1, 6], [0, 7, 0],
]


def document_lengths(n: int, rng, *, min_len: int = 128, max_splits: int = 10) -> tuple[list[int], int]:
    """FlashMask's packing recipe: 1 to ``max_splits`` random split points, every document at least
    ``min_len`` tokens, then a padding tail shorter than ``min_len``. Returns (lengths, n)."""
    tail = int(rng.integers(0, min(min_len, n - min_len) + 1)) if n > min_len else 0
    usable = n - tail
    splits = int(rng.integers(1, max_splits + 1))
    docs = max(1, min(splits + 1, usable // min_len))
    extra = usable - docs * min_len
    cuts = np.sort(rng.integers(0, extra + 1, size=docs - 1))
    parts = np.diff(np.concatenate([[0], cuts, [extra]]))
    return [int(min_len + p) for p in parts], n


def full_tree_choices(sizes) -> list[tuple[int, ...]]:
    """Every path of a full speculative tree: depth k has ``prod(sizes[:k])`` nodes (MEDUSA heads x candidates)."""
    return [p for depth in range(1, len(sizes) + 1) for p in itertools.product(*(range(s) for s in sizes[:depth]))]


def _shared_question(n, rng):
    lengths, _ = document_lengths(n, rng)
    questions, answers = [], []
    for length in lengths:
        count = int(rng.integers(2, 5))
        ans = [max(1, int(length * rng.uniform(0.1, 0.2))) for _ in range(count)]
        questions.append(length - sum(ans))
        answers.append(ans)
    return masks.shared_question(questions, answers, n=n)


def _vlm(n, rng):
    segments, total, text = [], 0, True
    while total < n:
        length = int(rng.integers(64, 513)) if text else int(rng.choice([256, 576, 1024]))
        length = min(length, n - total)
        segments.append(("text" if text else "image", length))
        total += length
        text = not text
    return masks.interleaved(segments)


def random_geometric_adjacency(n: int, degree: float, rng):
    """Random geometric graph in the unit square with about ``degree`` neighbours per node, self loops, and
    the nodes in random order (CSR, bool)."""
    import scipy.sparse as sp
    from scipy.spatial import cKDTree

    points = rng.random((n, 2))
    radius = np.sqrt(degree / (np.pi * n))
    pairs = cKDTree(points).query_pairs(radius, output_type="ndarray")
    rows = np.concatenate([pairs[:, 0], pairs[:, 1], np.arange(n)])
    cols = np.concatenate([pairs[:, 1], pairs[:, 0], np.arange(n)])
    adj = sp.csr_array((np.ones(rows.size, bool), (rows, cols)), shape=(n, n))
    order = rng.permutation(n)
    return adj[order][:, order]


def build(name: str, n: int, seed: int = 0) -> masks.MaskSpec:
    """The mask spec of workload ``name`` over n tokens (``medusa``: a 4-head x 4-candidate tree, 340
    queries, over a ``MEDUSA_PREFIX``-token prefix; n is ignored)."""
    rng = np.random.default_rng(seed)
    if name == "full":
        return masks.full(n)
    if name == "causal":
        return masks.causal(n)
    if name == "swa":
        return masks.sliding_window(n, left=1023)
    if name == "sink_swa":
        return masks.sliding_window(n, left=1023, sinks=64)
    if name == "doc_causal":
        lengths, _ = document_lengths(n, rng)
        return masks.document(lengths, n=n)
    if name == "doc_prefix":
        lengths, _ = document_lengths(n, rng)
        prefix = [int(length * rng.uniform(0.3, 0.7)) for length in lengths]
        return masks.document(lengths, prefix=prefix, n=n)
    if name == "shared_question":
        return _shared_question(n, rng)
    if name == "vlm":
        return _vlm(n, rng)
    if name == "lf_dilated":
        return masks.longformer(n, 1024, dilation=2)
    if name == "lf_global":
        return masks.longformer(n, 512, global_tokens=64)
    if name == "bigbird":
        return masks.bigbird(n, 64, window_blocks=3, global_blocks=2, random_blocks=3, seed=seed)
    if name in ("graph", "graph_rcm"):
        adj = random_geometric_adjacency(n, 24, rng)
        return masks.from_graph(adj, reorder="auto" if name == "graph_rcm" else None)
    if name == "medusa":
        return masks.medusa_tree(full_tree_choices([4, 4, 4, 4]), prefix_len=MEDUSA_PREFIX)
    raise ValueError(f"unknown workload {name!r}; known: {', '.join(NAMES)}")
