"""Every docstring example in the package runs and prints what it says; so do the complete programs in the README and
docs/, and the demo the README opens with."""

import contextlib
import doctest
import importlib
import io
import re
from pathlib import Path

import pytest

MODULES = ["maskattn.masks.intervals", "maskattn.masks.dense", "maskattn.masks.reorder", "maskattn.api",
           "maskattn.bench.workloads", "maskattn.torch"]
ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name == "maskattn.torch":
        pytest.importorskip("torch", reason="maskattn.torch needs torch")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, f"{result.failed} of {result.attempted} examples failed"


def _host_programs():
    """(file, source) of the python blocks in the docs that are whole programs (they start with an import) and run
    on the host."""
    return [(doc, block) for doc in DOCS
            for block in re.findall(r"^```python\n(.*?)^```", doc.read_text(), flags=re.M | re.S)
            if block.startswith("import") and '"cuda"' not in block]


def test_docs_have_host_programs():
    names = {doc.name for doc, _ in _host_programs()}
    assert {"README.md", "graphs.md"} <= names, f"expected the quick start and the graph examples; found {names}"


@pytest.mark.parametrize("doc, source",
                         [pytest.param(*p, id=f"{p[0].name}-{i}") for i, p in enumerate(_host_programs())])
def test_doc_program(doc, source):
    """Runs, and each ``print(...)  # <number> ...`` prints that number: the docs' claims stay true."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(source, str(doc), "exec"), {"__name__": "__doc_program__"})
    printed = stdout.getvalue().splitlines()
    for claim in re.findall(r"^print\(.*\)\s+#\s*(\d+)\b", source, flags=re.M):
        assert claim in printed, f"{doc.name} says {claim} is printed; it printed {printed[-5:]}"


def test_demo_runs_and_checks_itself(capsys):
    from maskattn.__main__ import main

    assert main(["demo", "--n", "512", "--heads", "2", "--cpu"]) == 0
    out = capsys.readouterr().out
    error = float(re.search(r"relative L2 error against a dense float64 softmax: (\S+)", out).group(1))
    assert error <= 1e-5, out
