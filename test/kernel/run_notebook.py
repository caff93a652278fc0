"""Executes a notebook with nbclient through a given kernel and prints a JSON summary.

Usage: run_notebook.py NOTEBOOK KERNEL_NAME OUT_NOTEBOOK TIMEOUT_S
JUPYTER_PATH must point at the kernelspec. Errors in cells do not stop the run
(allow_errors), so the summary lists every failing cell; the test asserts there
are none. Each cell has TIMEOUT_S to finish.
"""
import json
import os
import sys
import time

import nbformat
from nbclient import NotebookClient

path, kernel_name, out_path, timeout = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
nb = nbformat.read(path, as_version=4)
client = NotebookClient(
    nb,
    kernel_name=kernel_name,
    timeout=timeout,
    startup_timeout=60,
    allow_errors=True,
    resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}},
)
t0 = time.monotonic()
client.execute()
elapsed = time.monotonic() - t0
nbformat.write(nb, out_path)

cells = []
for i, cell in enumerate(nb.cells):
    if cell.cell_type != "code":
        continue
    outputs = []
    for o in cell.get("outputs", []):
        entry = {"output_type": o.output_type}
        if o.output_type in ("display_data", "execute_result"):
            entry["mime"] = sorted(o.data.keys())
            entry["text"] = o.data.get("text/plain", "")
        elif o.output_type == "stream":
            entry["name"] = o.name
            entry["text"] = o.text
        elif o.output_type == "error":
            entry["ename"] = o.ename
            entry["evalue"] = o.evalue
            entry["traceback"] = o.traceback
        outputs.append(entry)
    cells.append({"index": i, "execution_count": cell.get("execution_count"), "source": cell.source[:80], "outputs": outputs})
print(json.dumps({"elapsed_s": elapsed, "cells": cells}))
