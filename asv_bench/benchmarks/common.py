"""What the suites share, written against every commit the history installs (``scripts/asv_history.sh``).

The suites at HEAD time older commits' packages, so they reach those packages only through what every commit
since 437e45c offers: ``maskattn.masks`` builders, ``maskattn.compile_mask``, ``maskattn.attention`` /
``attention_backward``, and the modules below, which moved when the package was layered (d8c3d49). Parameters
are fixed here, not read from the installed package, so that every commit's results share one grid.
"""

import importlib


def first_module(*names):
    """The first of the modules ``names`` that imports: the same module under each commit's layout."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"none of {', '.join(names)} imports")


# the benchmark workloads of WORKLOADS.md (seeded mask specs)
workloads = first_module("maskattn.workloads", "maskattn.bench.workloads")

WORKLOADS = ("full", "causal", "swa", "sink_swa", "doc_causal", "doc_prefix", "shared_question", "vlm",
             "lf_dilated", "lf_global", "bigbird", "graph", "graph_rcm", "medusa")
ONE_SIZE = ("medusa",)  # a 340-token tree over a 4096-token prefix: n does not apply, it runs at the first size
