"""Run notebooks/quickstart.ipynb in a fresh Jupyter kernel and print what it shows.

    python examples/quickstart.py [--backend numba-cuda|mlir] [--save executed.ipynb]

The notebook is the tour of gpucache_ext: compile, re-run for hits, switch the
target, inspect PTX and resources, launch.  It gives the magic a cache of its
own (a new, empty folder, deleted when the kernel stops), so every run shows
the same story, whatever your user cache folder holds.  ``--backend mlir``
tours numba-cuda-mlir's kernels instead (notebooks/quickstart_mlir.ipynb);
the default is numba-cuda's tour where numba-cuda is installed, else that one.
"""

import argparse
import importlib.util
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOK = NOTEBOOKS / "quickstart.ipynb"
TOURS = {"numba-cuda": NOTEBOOK, "mlir": NOTEBOOKS / "quickstart_mlir.ipynb"}


def text_of(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return "\n".join(output.get("traceback", []))
    return output.get("data", {}).get("text/plain", "")


def run(path: Path = NOTEBOOK, timeout: int = 600) -> nbformat.NotebookNode:
    """Execute the notebook (its folder as the working directory) and return it."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return notebook


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=sorted(TOURS), default=None,
                        help="whose kernels to tour (default: numba-cuda where installed, else mlir)")
    parser.add_argument("--save", type=Path, help="also write the executed notebook here")
    args = parser.parse_args()
    backend = args.backend or ("numba-cuda" if importlib.util.find_spec("numba_cuda") else "mlir")
    notebook = run(TOURS[backend])
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            print("\n# " + cell.source.replace("\n", "\n# "))
            continue
        print("\n>>> " + cell.source.replace("\n", "\n... "))
        for output in cell.get("outputs", []):
            text = text_of(output).rstrip()
            if text:
                print(text)
    if args.save:
        nbformat.write(notebook, args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
