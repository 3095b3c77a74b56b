# Shared by frugal's scripts: install missing Debian packages, configure and build.
# Source it; do not run it.

FRUGAL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Everything frugal builds with or uses, all from Debian's archive (nothing is downloaded by the build).
FRUGAL_PACKAGES=(
  cmake ninja-build g++ python3          # build tools; python3 runs the CLI checks
  doctest-dev libcli11-dev nlohmann-json3-dev libstb-dev zlib1g-dev libboost-context-dev
  libopenblas-openmp-dev libopenmpi-dev openmpi-bin libbenchmark-dev
  libjemalloc-dev libmimalloc-dev        # peers of `frugal bench alloc` (loaded with dlopen)
  dataset-fashion-mnist                  # the default dataset (/usr/share/datasets/fashion-mnist)
  chromium                               # renders `frugal train --memory-timeline`'s page in a check (~40 s to install)
)

# Installs the packages that are missing, and only those; runs apt-get as root or through sudo.
frugal_install_packages() {
  local missing=()
  for package in "${FRUGAL_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "frugal: installing missing packages: ${missing[*]}"
  local as_root=()
  [ "$(id -u)" -eq 0 ] || as_root=(sudo)
  "${as_root[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# frugal_build BUILD_DIR [CMAKE_ARGS...]: configures (once) and builds everything in BUILD_DIR.
frugal_build() {
  local build_dir=$1; shift
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    cmake -S "$FRUGAL_ROOT" -B "$build_dir" "${generator[@]}" "$@"
  else
    cmake "$build_dir" "$@" >/dev/null
  fi
  cmake --build "$build_dir" --parallel "$(nproc)"
}
