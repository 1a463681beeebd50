#!/usr/bin/env bash
# Installs what building and testing weir needs on a fresh Debian machine, only when missing:
# a C/C++ toolchain and libclang (RocksDB's build uses bindgen), PostgreSQL server binaries
# (the postgres sink's tests run a real server). Safe to run again.
set -euo pipefail

need=()
command -v cc >/dev/null 2>&1 || need+=(build-essential)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)

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
