#!/usr/bin/env bash
# Installs what building and testing weir needs on a fresh Debian machine, only when missing:
# a C/C++ toolchain and libclang (RocksDB's build uses bindgen), PostgreSQL server binaries
# (the postgres sink's tests run a real server), psql, and for the wire tests a Python
# virtualenv with psycopg 3 and psycopg2 and the sqllogictest runner. Safe to run again.
set -euo pipefail

need=()
command -v cc >/dev/null 2>&1 || need+=(build-essential)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v psql >/dev/null 2>&1 || need+=(postgresql-client)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing; install Rust with rustup (https://rustup.rs)" >&2
  exit 1
fi

# Python drivers for the wire tests, in a virtualenv outside the clone (reused between runs).
VENV="${WEIR_VENV:-/var/tmp/weir-venv}"
if ! "$VENV/bin/python" -c 'import psycopg, psycopg2' >/dev/null 2>&1; then
  echo "setup: making $VENV with psycopg and psycopg2" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "psycopg[binary]>=3.1" "psycopg2-binary>=2.9"
fi

# The sqllogictest runner, to run the .slt files over the wire.
if ! command -v sqllogictest >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/sqllogictest" ]; then
  echo "setup: cargo install sqllogictest-bin" >&2
  cargo install --locked --quiet sqllogictest-bin --version 0.29.1
fi
