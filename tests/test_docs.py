"""Every docstring example in the package runs and prints what it says; so do the README's complete programs and
the demo it opens with."""

import contextlib
import doctest
import importlib
import io
import re
from pathlib import Path

import pytest

MODULES = ["maskattn.masks", "maskattn.plan", "maskattn.api", "maskattn.workloads", "maskattn.torch"]
README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name == "maskattn.torch":
        pytest.importorskip("torch", reason="maskattn.torch needs torch")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, f"{result.failed} of {result.attempted} examples failed"


def _host_programs():
    """The README's python blocks that are whole programs (they start with an import) and run on the host."""
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.M | re.S)
    return [b for b in blocks if b.startswith("import") and '"cuda"' not in b]


def test_readme_has_host_programs():
    assert len(_host_programs()) >= 2, f"expected the quick start and the graph example in {README}"


@pytest.mark.parametrize("source", _host_programs(), ids=lambda s: s.splitlines()[-1][:40])
def test_readme_program(source):
    """Runs, and each ``print(...)  # <number> ...`` prints that number: the README's claims stay true."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(source, str(README), "exec"), {"__name__": "__readme__"})
    printed = stdout.getvalue().splitlines()
    for claim in re.findall(r"^print\(.*\)\s+#\s*(\d+)\b", source, flags=re.M):
        assert claim in printed, f"the README says {claim} is printed; it printed {printed[-5:]}"


def test_demo_runs_and_checks_itself(capsys):
    from maskattn.__main__ import main

    assert main(["demo", "--n", "512", "--heads", "2", "--cpu"]) == 0
    out = capsys.readouterr().out
    error = float(re.search(r"relative L2 error against a dense float64 softmax: (\S+)", out).group(1))
    assert error <= 1e-5, out
