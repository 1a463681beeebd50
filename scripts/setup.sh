#!/usr/bin/env bash
# Installs, only when missing, what weir needs on a fresh Debian machine, then checks that
# every library the build loads is where the build looks for it. Safe to run again.
#
#   scripts/setup.sh            to build and run weir: a C/C++ toolchain and libclang
#                               (librocksdb-sys runs bindgen, which dlopens libclang)
#   scripts/setup.sh --tests    also what the tests use: PostgreSQL server binaries (the
#                               postgres sink's tests start a real server), psql, a Python
#                               virtualenv with psycopg 3 and psycopg2, sqllogictest-bin,
#                               tansu (a Kafka-compatible broker with transactions), and
#                               headless Chromium with chromedriver (the dashboard's test)
#   scripts/setup.sh --check    install nothing; report what is missing (exit 1 if anything)
#
# Each check tests the very file or command that is used, not a look-alike: libclang-cpp.so
# (the C++ interface, package libclang-cpp14) is not libclang and does not satisfy bindgen.
set -euo pipefail

mode=run
case "${1:-}" in
  "") ;;
  --tests) mode=tests ;;
  --check) mode=check ;;
  --check-tests) mode=check-tests ;;
  *) echo "usage: scripts/setup.sh [--tests | --check | --check-tests]" >&2; exit 2 ;;
esac

# --- checks: each prints nothing and succeeds when the thing is there -----------------------

# A C and a C++ compiler (RocksDB, lz4, zstd are C/C++ built by cc-rs) and `ar`.
have_toolchain() { command -v cc && command -v c++ && command -v ar && command -v make; } >/dev/null 2>&1

# clang-sys (used by bindgen, used by librocksdb-sys's build script) looks for a shared library
# named libclang.so, libclang-N.so, libclang.so.N or libclang-N.so.N in LIBCLANG_PATH,
# `llvm-config --libdir`, the llvm directories and the linker's path, and keeps the first one
# that loads and exports the C API. Do the same: a candidate counts only when it exports
# clang_createIndex (libclang-cpp.so.14 matches a loose glob but does not).
libclang_candidates() {
  {
    [ -n "${LIBCLANG_PATH:-}" ] && ls -d "$LIBCLANG_PATH"/* "$LIBCLANG_PATH" 2>/dev/null
    command -v llvm-config >/dev/null 2>&1 && ls -d "$(llvm-config --libdir)"/* 2>/dev/null
    ls -d /usr/lib/llvm-*/lib/* /usr/local/lib/* /usr/lib/*-linux-gnu/* /usr/lib/* 2>/dev/null
    ldconfig -p 2>/dev/null | awk '{print $NF}'
  } | grep -E '/libclang(-[0-9.]+)?\.so(\.[0-9.]+)?$' | sort -u
}
have_libclang() {
  local lib
  for lib in $(libclang_candidates); do
    # Not `nm | grep -q`: under pipefail, grep quitting early kills nm with SIGPIPE and the
    # check fails at random.
    [ -f "$lib" ] || continue
    case " $(nm -D --defined-only "$lib" 2>/dev/null | awk '{sub(/@.*/, "", $NF); print $NF}' | tr '\n' ' ') " in
      *" clang_createIndex "*) return 0 ;;
    esac
  done
  return 1
}

# The PostgreSQL server programs the tests run (tests/tests/common/pg.rs).
have_pg_server() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ] && return 0
  done
  return 1
}
have_psql() { command -v psql >/dev/null 2>&1 && psql --version >/dev/null 2>&1; }
# `python3 -m venv` needs both modules (Debian ships ensurepip in python3-venv).
have_python_venv() { python3 -c 'import venv, ensurepip' >/dev/null 2>&1; }
# The dashboard's browser test drives headless Chromium through chromedriver (WebDriver).
have_chromium() { command -v chromium >/dev/null 2>&1 && chromium --version >/dev/null 2>&1; }
have_chromedriver() { command -v chromedriver >/dev/null 2>&1 && chromedriver --version >/dev/null 2>&1; }

VENV="${WEIR_VENV:-/var/tmp/weir-venv}"
have_drivers() { "$VENV/bin/python" -c 'import psycopg, psycopg2' >/dev/null 2>&1; }
TOOLS="${WEIR_TOOLS:-/var/tmp/weir-tools}"
have_tansu() { [ -x "$TOOLS/tansu-0.6.0-weir3/bin/tansu" ]; }
have_patch() { have_tansu || command -v patch >/dev/null 2>&1; }
sqllogictest_bin() { command -v sqllogictest 2>/dev/null || ls "$HOME/.cargo/bin/sqllogictest" 2>/dev/null; }
have_sqllogictest() { [ -n "$(sqllogictest_bin)" ] && "$(sqllogictest_bin)" --version >/dev/null 2>&1; }

# --- what each mode needs: "check|debian package|what it is for" ---------------------------
needs=(
  "have_toolchain|build-essential|C/C++ compiler for RocksDB"
  "have_libclang|libclang-dev|libclang for bindgen (librocksdb-sys)"
)
if [ "$mode" = tests ] || [ "$mode" = check-tests ]; then
  needs+=(
    "have_pg_server|postgresql|PostgreSQL server binaries (initdb, pg_ctl, postgres) for the sink tests"
    "have_psql|postgresql-client|psql for the wire tests"
    "have_python_venv|python3-venv|python3 -m venv for the psycopg tests"
    "have_patch|patch|patch(1), to build the tests' Kafka broker with scripts/tansu/*.patch"
    "have_chromium|chromium|headless Chromium for the dashboard's browser test"
    "have_chromedriver|chromium-driver|chromedriver (WebDriver) for the dashboard's browser test"
  )
fi

missing_pkgs=()
for n in "${needs[@]}"; do
  IFS='|' read -r check pkg why <<<"$n"
  if ! $check; then
    missing_pkgs+=("$pkg")
    echo "setup: missing: $why (Debian package $pkg)" >&2
  fi
done

if [ "$mode" = check ] || [ "$mode" = check-tests ]; then
  fail=${#missing_pkgs[@]}
  if [ "$mode" = check-tests ]; then
    have_drivers || { echo "setup: missing: psycopg and psycopg2 in $VENV (scripts/setup.sh --tests)" >&2; fail=1; }
    have_sqllogictest || { echo "setup: missing: sqllogictest-bin (scripts/setup.sh --tests)" >&2; fail=1; }
    have_tansu || { echo "setup: missing: tansu in $TOOLS/tansu-0.6.0-weir3 (scripts/setup.sh --tests)" >&2; fail=1; }
  fi
  command -v cargo >/dev/null 2>&1 || { echo "setup: missing: cargo (install Rust with rustup)" >&2; fail=1; }
  [ "$fail" -eq 0 ] && echo "setup: everything needed is present" >&2
  [ "$fail" -eq 0 ]
  exit
fi

if [ ${#missing_pkgs[@]} -gt 0 ]; then
  echo "setup: installing ${missing_pkgs[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing_pkgs[@]}" >/dev/null
fi

# Verify after installing: a package that installed but left the file somewhere the build does
# not look fails here, naming it, instead of 20 minutes into the build.
for n in "${needs[@]}"; do
  IFS='|' read -r check pkg why <<<"$n"
  if ! $check; then
    echo "setup: still missing after installing $pkg: $why" >&2
    exit 1
  fi
done

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing; install Rust with rustup (https://rustup.rs)" >&2
  exit 1
fi

[ "$mode" = tests ] || exit 0

# Python drivers for the wire tests, in a virtualenv outside the clone (reused between runs).
if ! have_drivers; then
  echo "setup: making $VENV with psycopg and psycopg2" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "psycopg[binary]>=3.1" "psycopg2-binary>=2.9"
  have_drivers || { echo "setup: psycopg / psycopg2 did not install into $VENV" >&2; exit 1; }
fi

# The sqllogictest runner, to run the .slt files over the wire. Built in its own target folder
# so it never touches weir's.
if ! have_sqllogictest; then
  echo "setup: cargo install sqllogictest-bin" >&2
  CARGO_TARGET_DIR="${TMPDIR:-/tmp}/weir-sqllogictest-build" \
    cargo install --locked --quiet sqllogictest-bin --version 0.29.1
  rm -rf "${TMPDIR:-/tmp}/weir-sqllogictest-build"
  have_sqllogictest || { echo "setup: sqllogictest-bin did not install" >&2; exit 1; }
fi

# The Kafka tests' broker: no Apache Kafka distribution is reachable from this machine's
# registries; tansu 0.6.0 (crates.io) speaks the protocol, with transactions once EndTxn is
# routed (scripts/tansu/end-txn.patch) and ListOffsets answers with offsets rather than the
# batch written first or last (scripts/tansu/list-offsets.patch). Built once into a cached folder (about 12 minutes on
# 2 cores): tansu's own lock file, its published sources for the two patched crates.
if ! have_tansu; then
  echo "setup: building tansu 0.6.0 (with scripts/tansu/*.patch) into $TOOLS/tansu-0.6.0-weir3" >&2
  here="$(cd "$(dirname "$0")" && pwd)"
  work="${TMPDIR:-/tmp}/weir-tansu-build"
  rm -rf "$work"
  mkdir -p "$work/tansu" "$work/patched"
  cp -r "$here/tansu/Cargo.toml" "$here/tansu/Cargo.lock" "$here/tansu/src" "$work/tansu/"
  (cd "$work/tansu" && cargo fetch --locked --quiet)
  for crate in tansu-broker-0.6.0 tansu-storage-0.6.0; do
    archive="$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$crate.crate" 2>/dev/null | head -n1)"
    [ -n "$archive" ] || { echo "setup: cargo fetch did not leave $crate.crate in its cache" >&2; exit 1; }
    tar -xzf "$archive" -C "$work/patched"
  done
  for fix in "$here"/tansu/*.patch; do
    patch --quiet -p1 -d "$work/patched" < "$fix"
  done
  (cd "$work/tansu" && CARGO_TARGET_DIR="$work/target" cargo build --release --quiet --features dynostore \
    --config "patch.crates-io.tansu-broker.path='$work/patched/tansu-broker-0.6.0'" \
    --config "patch.crates-io.tansu-storage.path='$work/patched/tansu-storage-0.6.0'")
  mkdir -p "$TOOLS/tansu-0.6.0-weir3/bin"
  cp "$work/target/release/tansu" "$TOOLS/tansu-0.6.0-weir3/bin/tansu"
  rm -rf "$work"
  have_tansu || { echo "setup: tansu did not install" >&2; exit 1; }
fi
