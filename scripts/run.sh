#!/usr/bin/env bash
# The main job: installs what is missing, builds, prints `frugal info`, then runs the tensor tour.
# Planned: training MobileNetV2 on Fashion-MNIST (`frugal train`) as the main job.
set -euo pipefail
source "$(dirname "$0")/common.sh"
frugal_install_packages
frugal_build "$FRUGAL_ROOT/build"
"$FRUGAL_ROOT/build/bin/frugal" info
echo
"$FRUGAL_ROOT/build/bin/01_tensor_tour"
