# Sourced by scripts/test and scripts/demo: make sure the Debian packages
# lowtide builds and tests with are installed. As root, installs only the
# missing ones with apt-get; otherwise prints what to install and exits 1.
# scripts/demo asks only for what the demo needs (LOWTIDE_DEMO_DEBS: build
# the library, run the seed workload), so a user without root who lacks
# only test packages still runs it; scripts/test asks for both lists.
# tests/install/deps_test.py runs both scripts' checks with a fake dpkg-query.

LOWTIDE_DEMO_DEBS=(
  libmimalloc-dev libmimalloc2.0 meson ninja-build g++ libfmt-dev pkg-config python3
  # the demo's peers: jemalloc, plain and tuned (glibc is always there)
  libjemalloc2
  # call sites' names for static functions and file:line (src/symbolize.cpp
  # dlopens libdw.so.1; the -dev package for its headers)
  libdw-dev
)

LOWTIDE_TEST_DEBS=(
  # the unit tests (Catch2 v2), tests that use numpy, call sites (libunwind)
  catch2 python3-numpy libunwind-dev binutils cmake
  # tests/tools: lowtide compare runs every peer and draws its plot; the
  # Dask demo runs a distributed LocalCluster
  libtcmalloc-minimal4 python3-matplotlib python3-distributed
  # reliability (docs/reliability.md): valgrind on the unit tests, libFuzzer
  # (clang with its runtime), clang-tidy and cppcheck (scripts/lint), and the
  # real programs of the 'real' suite: git, sqlite3, Python's own regression
  # tests (the `test` package beyond libregrtest)
  valgrind clang-14 libclang-rt-14-dev clang-tidy-14 cppcheck git sqlite3 libpython3.11-testsuite
  # tests/entry_points cxx_libcxx: operator new's contract on LLVM's libc++
  # (the runtime only: libc++-14-dev conflicts with libunwind-dev)
  libc++1-14 libc++abi1-14
  # tests/install: pip install into a virtualenv, offline (meson-python)
  python3-venv python3-pip python3-mesonpy
  # tests/stats: the Prometheus report read by the client library's parser
  python3-prometheus-client
  # tests/programs pandas and scripts/bench's pandas-etl
  python3-pandas
  # tests/programs jvm and scripts/bench's jvm-offheap: a real JVM's off-heap
  # buffers (bench/jvm/OffHeap.java, compiled with javac at run time)
  openjdk-17-jdk-headless
  # tests/programs node: Node.js (Debian's nodejs 18, or any node on PATH)
  nodejs
)

# Everything, for callers that do not choose.
LOWTIDE_DEBS=("${LOWTIDE_DEMO_DEBS[@]}" "${LOWTIDE_TEST_DEBS[@]}")

# lowtide_missing_debs [PKG...]: those of the packages (default: all) that
# are not installed, one a line.
lowtide_missing_debs() {
  local p status
  (($# != 0)) || set -- "${LOWTIDE_DEBS[@]}"
  for p in "$@"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    if [[ "$status" != "installed" ]]; then
      printf '%s\n' "$p"
    fi
  done
}

# lowtide_ensure_debs [PKG...]: returns when the packages (default: all)
# are installed; installs the missing ones as root, else exits 1 naming them.
lowtide_ensure_debs() {
  local missing
  (($# != 0)) || set -- "${LOWTIDE_DEBS[@]}"
  mapfile -t missing < <(lowtide_missing_debs "$@")
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
  mapfile -t missing < <(lowtide_missing_debs "$@")
  if ((${#missing[@]} != 0)); then
    echo "still missing after apt-get install: ${missing[*]}" >&2
    exit 1
  fi
}
