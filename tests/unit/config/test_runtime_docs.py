"""docs/worker.md's "Which GPUs can be measured" section is the one generated from the shipped
runtime and GPU tables (``config.runtime_docs``): change a table, regenerate the page."""

from __future__ import annotations

from gpucompare.config import runtime_docs
from tests.conftest import REPO_ROOT


def test_the_worker_page_holds_the_generated_tables() -> None:
    page = (REPO_ROOT / "docs" / "worker.md").read_text(encoding="utf-8")
    start = page.index(runtime_docs.BEGIN)
    end = page.index(runtime_docs.END) + len(runtime_docs.END)
    assert page[start:end] == runtime_docs.markdown()


def test_the_generated_tables_say_what_each_gpu_runs_with() -> None:
    text = runtime_docs.markdown()
    h100 = next(line for line in text.splitlines() if line.startswith("| H100 |"))
    assert "no: compute capability 9.0" in h100 and "yes: compute capability 9.0" in h100
    assert h100.endswith("| `ngc-24.06` |")
    b200 = next(line for line in text.splitlines() if line.startswith("| B200 |"))
    assert b200.endswith("| refused |")
    assert "`nvcr.io/nvidia/mxnet:24.06-py3`" in text and "rel-24-06.html" in text
