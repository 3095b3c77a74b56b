#!/usr/bin/env bash
# Run here, before a session on the lent GPU machine: that machine cannot reach a package mirror,
# so this stages the build dependencies it may lack (doctest, CLI11, nlohmann-json, stb and zlib,
# with their CMake config files) and Fashion-MNIST (30 MB, for frugal train) under .gpu-deps/
# (git-ignored). Pass it to the device tool as
# carry: [".gpu-deps"].
set -euo pipefail
source "$(dirname "$0")/common.sh"
frugal_install_packages
stage="$FRUGAL_ROOT/.gpu-deps"
rm -rf "$stage"
for package in doctest-dev libcli11-dev nlohmann-json3-dev libstb-dev zlib1g-dev dataset-fashion-mnist; do
  dpkg -L "$package" | while read -r path; do
    [ -f "$path" ] || continue
    case $path in /usr/share/doc/*|/usr/share/man/*) continue ;; esac
    mkdir -p "$stage$(dirname "$path")"
    cp "$path" "$stage$path"
  done
done
# doctest's exported targets name /usr literally; make them relative to where they now lie.
sed -i 's|^set(_IMPORT_PREFIX "/usr")$|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
  "$stage/usr/lib/cmake/doctest/doctestTargets.cmake"
du -sh "$stage"
