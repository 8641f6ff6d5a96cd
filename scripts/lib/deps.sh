# Sourced by scripts/test and scripts/demo: make sure the Debian packages
# lowtide builds and tests with are installed. As root, installs only the
# missing ones with apt-get; otherwise prints what to install and exits 1.

LOWTIDE_DEBS=(
  libmimalloc-dev libmimalloc2.0 meson ninja-build g++ libfmt-dev catch2
  python3 python3-numpy libunwind-dev binutils pkg-config cmake
  # tests/tools: lowtide compare runs every peer and draws its plot; the
  # Dask demo runs a distributed LocalCluster
  libjemalloc2 libtcmalloc-minimal4 python3-matplotlib python3-distributed
  # reliability (docs/reliability.md): valgrind on the unit tests, libFuzzer
  # (clang with its runtime), clang-tidy and cppcheck (scripts/lint), and the
  # real programs of the 'real' suite: git, sqlite3, Python's own regression
  # tests (the `test` package beyond libregrtest)
  valgrind clang-14 libclang-rt-14-dev clang-tidy-14 cppcheck git sqlite3 libpython3.11-testsuite
  # tests/stats: the Prometheus report read by the client library's parser
  python3-prometheus-client
)

lowtide_missing_debs() {
  local p status
  for p in "${LOWTIDE_DEBS[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    if [[ "$status" != "installed" ]]; then
      printf '%s\n' "$p"
    fi
  done
}

lowtide_ensure_debs() {
  local missing
  mapfile -t missing < <(lowtide_missing_debs)
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing Debian packages: ${missing[*]}" >&2
    echo "install them as root with:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "installing missing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  mapfile -t missing < <(lowtide_missing_debs)
  if ((${#missing[@]} != 0)); then
    echo "still missing after apt-get install: ${missing[*]}" >&2
    exit 1
  fi
}
