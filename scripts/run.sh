#!/usr/bin/env bash
# The main job: installs what is missing, builds, prints `frugal info`, then trains MobileNetV2 on
# Fashion-MNIST with `frugal train`'s defaults (one epoch, on cuda:0 when usable, else on the CPU)
# and prints what it measured: progress as it goes, then test accuracy, speed and peak memory by tag.
# Arguments are passed to `frugal train` (scripts/run.sh --epochs 3 --augment, say).
set -euo pipefail
source "$(dirname "$0")/common.sh"
frugal_install_packages
frugal_build "$FRUGAL_ROOT/build"
"$FRUGAL_ROOT/build/bin/frugal" info
echo
exec "$FRUGAL_ROOT/build/bin/frugal" train "$@"
