"""The kernel sources as the CUDA backend builds them carry a hash of the headers: CuPy's on-disk kernel cache keys a
build by its source text and options only, so a change to a .cuh alone must change the text it sees."""

from maskattn.backends.cuda import kernels


def test_a_header_change_changes_the_source(tmp_path, monkeypatch):
    monkeypatch.setattr(kernels, "source_dir", lambda: tmp_path)
    (tmp_path / "k.cu").write_text('#include "h.cuh"\n__global__ void k() {}\n')
    (tmp_path / "h.cuh").write_text("#define X 1\n")
    before = kernels.kernel_source("k.cu")
    assert before.startswith('#include "h.cuh"\n__global__ void k() {}\n')
    assert kernels.kernel_source("k.cu") == before
    (tmp_path / "h.cuh").write_text("#define X 2\n")
    assert kernels.kernel_source("k.cu") != before


def test_kernel_sources_from_another_folder(tmp_path, monkeypatch):
    """MASKATTN_KERNEL_SOURCES points the builds at another folder (scripts/kernel_ab.py times two against each
    other); unset, the installed sources serve."""
    monkeypatch.delenv("MASKATTN_KERNEL_SOURCES", raising=False)
    installed = kernels.source_dir()
    assert (installed / "fwd_sm90.cu").is_file()
    (tmp_path / "fwd.cu").write_text("// another fwd.cu\n")
    monkeypatch.setenv("MASKATTN_KERNEL_SOURCES", str(tmp_path))
    assert kernels.source_dir() == tmp_path
    assert kernels.kernel_source("fwd.cu").startswith("// another fwd.cu\n")
    monkeypatch.setenv("MASKATTN_KERNEL_SOURCES", "")
    assert kernels.source_dir() == installed


def test_kernels_are_cached_per_source_folder(tmp_path, monkeypatch):
    """The kernel caches key by MASKATTN_KERNEL_SOURCES too: one process switching folders (kernel_ab.py) gets each
    folder's build, each built once."""
    built = []

    @kernels.cached_per_sources
    def build(name, size=1):
        built.append((kernels.source_dir(), name, size))
        return len(built)

    monkeypatch.delenv("MASKATTN_KERNEL_SOURCES", raising=False)
    installed = build("k", size=2)
    monkeypatch.setenv("MASKATTN_KERNEL_SOURCES", str(tmp_path))
    other = build("k", size=2)
    assert (installed, other) == (1, 2) and built[1][0] == tmp_path
    assert build("k", size=2) == other
    monkeypatch.setenv("MASKATTN_KERNEL_SOURCES", "")
    assert build("k", size=2) == installed
    assert build.cache_info().currsize == 2 and len(built) == 2
