"""The "Which GPUs can be measured" section of docs/worker.md, generated from the shipped tables
(``data/runtimes.csv`` and ``data/gpus.csv``); ``tests/unit/config/test_runtime_docs.py`` keeps
the page equal to :func:`markdown`. Regenerate it with
``python -c "from gpucompare.config.runtime_docs import markdown; print(markdown())"``.
"""

from __future__ import annotations

from gpucompare.config import gpus, runtimes

BEGIN = "<!-- generated: gpucompare.config.runtime_docs.markdown() -->"
END = "<!-- end of generated section -->"


def _cell(text: str | None) -> str:
    return (text or "–").replace("|", "\\|")


def runtimes_table() -> list[str]:
    lines = ["| runtime | MXNet | CUDA | cuDNN | Python | compute capability | delivery | image (digest) | "
             "source (read on) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runtimes.table():
        image = f"`{r.image}` ({r.digest or 'no digest cited: the pull records it'})" if r.image else "–"
        delivery = "docker run --gpus all" if r.delivery == "docker" else "venv"
        lines.append(f"| `{r.name}` | {r.mxnet} | {_cell(r.cuda)} | {_cell(r.cudnn)} | {r.python} | "
                     f"{r.capability_text()} | {delivery} | {image} | {_cell(r.source)} ({r.source_date}) |")
    return lines


def gpus_table() -> list[str]:
    names = [r.name for r in runtimes.gpu_runtimes()]
    lines = ["| GPU | architecture | compute capability | " + " | ".join(f"`{n}`" for n in names)
             + " | auto picks |",
             "|---|---|---|" + "---|" * len(names) + "---|"]
    for model in gpus.read_table():
        cells = []
        for name in names:
            runs, reason = model.runs_on(name)
            cells.append(("yes" if runs else "no") + f": {_cell(reason)}")
        usable = model.runnable_with()
        picks = f"`{usable[0]}`" if usable else "refused"
        lines.append(f"| {model.name} | {model.architecture} | {model.compute_capability} | "
                     + " | ".join(cells) + f" | {picks} |")
    return lines


def markdown() -> str:
    """The generated section, markers included."""
    return "\n".join([BEGIN, "", "Worker runtimes (`plugins/gpucompare/data/runtimes.csv`):", "",
                      *runtimes_table(), "", "GPUs (`plugins/gpucompare/data/gpus.csv`), per runtime; "
                      "`auto` picks the first runtime that runs the GPU unless one runtime runs every "
                      "GPU of the fleet:", "", *gpus_table(), "", END])
