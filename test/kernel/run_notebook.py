"""Executes a notebook with nbclient through a given kernel and prints a JSON summary.

Usage: run_notebook.py NOTEBOOK KERNEL_NAME OUT_NOTEBOOK TIMEOUT_S
JUPYTER_PATH must point at the kernelspec. Errors in cells do not stop the run
(allow_errors), so the summary lists every failing cell; the test asserts there
are none. Each cell has TIMEOUT_S to finish. A code cell tagged
"restart-kernel-before" runs after a kernel restart, as a person pressing
Kernel > Restart there would (the notebook's own text says so).
"""
import asyncio
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
RESTART_TAG = "restart-kernel-before"


async def execute():
    """nbclient's async_execute, with a kernel restart before each tagged cell."""
    client.reset_execution_trackers()
    async with client.async_setup_kernel():
        for index, cell in enumerate(nb.cells):
            if RESTART_TAG in cell.get("metadata", {}).get("tags", []):
                await client.km.restart_kernel()
                await client.kc.wait_for_ready(timeout=60)
            # The kernel's own execution_count (not nbclient's running count), so a restart shows as 1 again.
            await client.async_execute_cell(cell, index)
        client.set_widgets_metadata()


t0 = time.monotonic()
asyncio.run(execute())
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
            html = o.data.get("text/html", "")
            if html and len(html) < 100_000:  # tables, not figures that inline plotly.js
                entry["html"] = html
        elif o.output_type == "stream":
            entry["name"] = o.name
            entry["text"] = o.text
        elif o.output_type == "error":
            entry["ename"] = o.ename
            entry["evalue"] = o.evalue
            entry["traceback"] = o.traceback
        outputs.append(entry)
    cells.append({"index": i, "execution_count": cell.get("execution_count"), "source": cell.source[:80], "tags": cell.get("metadata", {}).get("tags", []), "outputs": outputs})
print(json.dumps({"elapsed_s": elapsed, "cells": cells}))
