#!/usr/bin/env bash
# The Debian packages the tests use, installed when missing (`npm test` runs
# this first, so README's two commands are all a new machine needs; .ci/run
# calls `npm test` too). Needs root (or passwordless sudo) to install; without
# either it names what is missing and the command that installs it, and stops.
set -euo pipefail
# The Python the engine and the kernel tests use (HEARTH_SETUP_PYTHON only for the set-up's own test).
py="${HEARTH_SETUP_PYTHON:-/usr/bin/python3}"
export DEBIAN_FRONTEND=noninteractive

missing=()
# The tensor engine: Debian's CPU torch (only /usr/bin/python3 sees it) with OpenBLAS
# (without it Debian's torch multiplies on the reference BLAS, ~10x slower).
"$py" -c "import torch, numpy" >/dev/null 2>&1 || missing+=(python3-torch python3-numpy)
dpkg -s libopenblas0-pthread >/dev/null 2>&1 || missing+=(libopenblas0-pthread)
# The kernel and notebook tests drive the kernel with Jupyter's own client, nbclient and kernel test suite.
"$py" -c "import jupyter_client" >/dev/null 2>&1 || missing+=(jupyter-client)
"$py" -c "import nbclient" >/dev/null 2>&1 || missing+=(python3-nbclient)
"$py" -c "import nbformat" >/dev/null 2>&1 || missing+=(python3-nbformat)
"$py" -c "import nbconvert" >/dev/null 2>&1 || missing+=(jupyter-nbconvert)
"$py" -c "import ipykernel" >/dev/null 2>&1 || missing+=(python3-ipykernel)
"$py" -c "import jupyter_kernel_test" >/dev/null 2>&1 || missing+=(python3-jupyter-kernel-test)
# The agent endpoint's "any language" test drives it from Python over plain HTTP.
"$py" -c "import httpx" >/dev/null 2>&1 || missing+=(python3-httpx)
# Exported notebooks are rendered and screenshotted in headless Chromium; the browser tests open the notebooks
# in Jupyter Notebook 6 (Debian's; playwright-core, an npm devDependency, drives that Chromium: no browser download).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ -x /usr/bin/jupyter-notebook ] || missing+=(jupyter-notebook)
# The Slurm tests put each node in a network namespace (ip netns + veth); Slurm itself their harness installs.
[ -x /usr/sbin/ip ] || missing+=(iproute2)
# The durability test watches the head's flushes and renames with strace (a power loss cannot be staged).
command -v strace >/dev/null 2>&1 || missing+=(strace)

[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "npm test: the tests need these Debian packages, and installing them needs root:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  echo "then run npm test again." >&2
  exit 1
fi
echo "npm test: installing the Debian packages the tests use: ${missing[*]}" >&2
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
