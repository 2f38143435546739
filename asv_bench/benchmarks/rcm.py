"""Graph node orderings (maskprep.rcm) against scipy's reverse_cuthill_mckee: time, and the active 128 x 128
tiles each order leaves (``track_*``), for every family of the test corpus and on a 1,000,000-node,
20,000,000-edge random geometric graph.

Run as a script to print the per-family table of docs/graphs.md (``--million`` adds the large graph)::

    python asv_bench/benchmarks/rcm.py [--million]
"""

import sys
import time

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee as scipy_rcm

from maskattn._maskprep import rcm

try:
    from .common import first_module
except ImportError:  # run as a script
    from common import first_module

# under both package layouts of the commits the history installs (common.py)
testing = first_module("maskattn.testing", "maskattn._graphs")
reorder = first_module("maskattn.masks.reorder", "maskattn._reorder")
TILE, active_tiles, node_order = reorder.TILE, reorder.active_tiles, reorder.node_order
default_threads = getattr(first_module("maskattn._maskprep"), "default_threads", None) or \
    first_module("maskattn.plan").default_threads

SIZES = [1000, 5000, 20000]
ORDERS = {
    "scipy": scipy_rcm,
    "rcm": lambda adj: node_order(adj, "rcm"),
    "auto": lambda adj: node_order(adj, "auto"),
}
PATTERNS = {
    "declared symmetric": lambda adj: (adj, True),
    "symmetric undeclared": lambda adj: (adj, False),
    "directed": lambda adj: (sp.triu(adj, format="csr"), False),
}
"""How the large graph is handed over: ``name -> (graph -> (pattern, declared symmetric))``; "directed" keeps
its upper triangle, which both libraries must turn into A + A^T."""


def tiles(track):
    track.unit = "tiles"
    return track


def million():
    """The large graph: 1,000,000 points in the unit square, 40 neighbours each (20,000,000 edges)."""
    return testing.random_geometric(1_000_000, 2, degree=40.0, seed=0)


class Corpus:
    params = [list(testing.FAMILIES), SIZES]
    param_names = ["family", "n"]

    def setup(self, family, n):
        self.adj = testing.FAMILIES[family](n, 0)

    def time_scipy(self, family, n):
        ORDERS["scipy"](self.adj)

    def time_rcm(self, family, n):
        ORDERS["rcm"](self.adj)

    def time_auto(self, family, n):
        ORDERS["auto"](self.adj)

    @tiles
    def track_tiles_scipy(self, family, n):
        return active_tiles(self.adj, ORDERS["scipy"](self.adj))

    @tiles
    def track_tiles_rcm(self, family, n):
        return active_tiles(self.adj, ORDERS["rcm"](self.adj))

    @tiles
    def track_tiles_auto(self, family, n):
        return active_tiles(self.adj, ORDERS["auto"](self.adj))


class Million:
    """maskprep's RCM (plain and block-aware) on the large graph: declared symmetric (searched as given),
    symmetric undeclared (a fingerprint finds it symmetric) and directed (A + A^T is built; the threads share
    that and the check, the searches run on one)."""

    params = [list(PATTERNS), [1, 2]]
    param_names = ["pattern", "threads"]
    timeout = 600
    number = 1
    repeat = 3

    def setup_cache(self):
        return million()

    def setup(self, adj, pattern, threads):
        self.adj, self.symmetric = PATTERNS[pattern](adj)

    def time_rcm(self, adj, pattern, threads):
        rcm.reverse_cuthill_mckee(self.adj.indptr, self.adj.indices, symmetric=self.symmetric, threads=threads)

    def time_block(self, adj, pattern, threads):
        rcm.reverse_cuthill_mckee(self.adj.indptr, self.adj.indices, symmetric=self.symmetric, tile=TILE,
                                  threads=threads)


class MillionScipy:
    """scipy's reverse_cuthill_mckee on the same patterns (``symmetric_mode`` as declared: otherwise it builds
    A + A^T)."""

    params = [list(PATTERNS)]
    param_names = ["pattern"]
    timeout = 600
    number = 1
    repeat = 3

    def setup_cache(self):
        return million()

    def setup(self, adj, pattern):
        self.adj, self.symmetric = PATTERNS[pattern](adj)

    def time_scipy(self, adj, pattern):
        scipy_rcm(self.adj, symmetric_mode=self.symmetric)


class MillionTiles:
    """reorder="auto" end to end (symmetrises, orders, keeps the better of it and the given order), and the
    tiles each order leaves on the large graph."""

    timeout = 600
    number = 1
    repeat = 3

    def setup_cache(self):
        return million()

    def time_auto(self, adj):
        node_order(adj, "auto")

    @tiles
    def track_tiles_scipy(self, adj):
        return active_tiles(adj, ORDERS["scipy"](adj))

    @tiles
    def track_tiles_rcm(self, adj):
        return active_tiles(adj, ORDERS["rcm"](adj))

    @tiles
    def track_tiles_auto(self, adj):
        return active_tiles(adj, ORDERS["auto"](adj))


def _best_time(order, adj, repeat=3):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        perm = order(adj)
        times.append(time.perf_counter() - start)
    return perm, min(times)


def table(with_million=False):
    """Markdown tables: active tiles and times per graph of the corpus, the mean ratio per family, and with
    ``with_million`` the timings on the large graph."""
    print("| family | n | blocks | scipy tiles | rcm tiles | auto tiles | auto / scipy "
          "| scipy ms | rcm ms | auto ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    ratios = {}
    for family, n, adj in testing.corpus(SIZES, seed=0):
        tiles, ms = {}, {}
        for name, order in ORDERS.items():
            perm, seconds = _best_time(order, adj)
            tiles[name], ms[name] = active_tiles(adj, perm), 1e3 * seconds
        ratio = tiles["auto"] / tiles["scipy"]
        ratios.setdefault(family, []).append(ratio)
        blocks = -(-adj.shape[0] // TILE)
        print(f"| {family} | {adj.shape[0]} | {blocks * blocks} | {tiles['scipy']} | {tiles['rcm']} | "
              f"{tiles['auto']} | {ratio:.3f} | {ms['scipy']:.1f} | {ms['rcm']:.1f} | {ms['auto']:.1f} |")
    print("\n| family | auto / scipy, mean over sizes |\n| --- | ---: |")
    for family, r in ratios.items():
        print(f"| {family} | {np.mean(r):.3f} |")
    print(f"| **corpus** | **{np.mean([x for r in ratios.values() for x in r]):.3f}** |")
    if with_million:
        adj = million()
        print(f"\n1,000,000 nodes, {(adj.nnz - adj.shape[0]) // 2:,} edges (best of 3, seconds; maskprep with 1 "
              f"and {default_threads()} threads):\n")
        print("| pattern | scipy RCM | maskprep RCM | maskprep RCM, threads | block-aware, threads "
              "| reorder=\"auto\" |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, hand_over in PATTERNS.items():
            pattern, symmetric = hand_over(adj)
            times = [_best_time(lambda a: scipy_rcm(a, symmetric_mode=symmetric), pattern)[1]]
            for tile, threads in ((0, 1), (0, default_threads()), (TILE, default_threads())):
                times.append(_best_time(lambda a: rcm.reverse_cuthill_mckee(
                    a.indptr, a.indices, symmetric=symmetric, tile=tile, threads=threads), pattern)[1])
            auto = "" if symmetric else f"{_best_time(ORDERS['auto'], pattern)[1]:.2f}"
            print(f"| {name} | " + " | ".join(f"{t:.2f}" for t in times) + f" | {auto} |")
        print("\n| order | active tiles |\n| --- | ---: |")
        for name, order in ORDERS.items():
            print(f"| {name} | {active_tiles(adj, order(adj))} |")


if __name__ == "__main__":
    table(with_million="--million" in sys.argv[1:])
