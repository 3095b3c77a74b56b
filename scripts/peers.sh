#!/usr/bin/env bash
# Installs the peers `frugal bench train` compares against: today's PyTorch and torchvision from PyPI,
# in a virtual environment in the build tree (BUILD/peers-venv), beside Debian's python3-torch 1.13.
# For benchmarks only: no test, no CI run and no part of frugal needs them (frugal never imports
# PyTorch; the benchmark runs bench/pytorch_train_peer.py in the peer's interpreter).
# The PyPI wheels carry CUDA libraries (about 5 GB); here they run on the CPU.
#
#   scripts/peers.sh [BUILD_DIR]      default: build
# Pins: none on purpose: the peer is the release a user would install today; the benchmark's JSON
# records the version it ran (`notes`).
set -euo pipefail
source "$(dirname "$0")/common.sh"
build_dir=${1:-$FRUGAL_ROOT/build}
venv=$build_dir/peers-venv

FRUGAL_PACKAGES+=(python3-venv python3-torch python3-torchvision)
frugal_install_packages

mkdir -p "$build_dir"
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"   # Debian's interpreter, so both peers run the same Python
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet --upgrade torch torchvision
"$venv/bin/python" -c 'import torch, torchvision; print("peers: torch", torch.__version__, "torchvision", torchvision.__version__, "in", __import__("sys").prefix)'
/usr/bin/python3 -c 'import torch; print("peers: torch", torch.__version__, "(Debian) in /usr")'
