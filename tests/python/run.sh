#!/usr/bin/env bash
# Interop suite: kafka-python 3.0.12 (an independent Kafka client) against a real kquotad.
#
#   bash tests/python/run.sh [extra pytest args]
#
# Needs python3 (with venv or pip), cargo and network access to PyPI on the first run. The virtualenv
# lives in target/python-venv and is reused. Any failure to set up the environment is an error: the suite
# is never skipped and never passes empty.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"

die() {
  echo "tests/python/run.sh: error: $*" >&2
  exit 1
}

command -v cargo >/dev/null 2>&1 || die "cargo not found; install a Rust toolchain"

# shellcheck source=tests/python/venv.sh
. "$ROOT/tests/python/venv.sh"

echo "== building kquotad (release)"
cargo build --release --bin kquotad
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
export KQUOTAD_BIN="$TARGET_DIR/release/kquotad"
[ -x "$KQUOTAD_BIN" ] || die "$KQUOTAD_BIN was not built"

echo "== pytest"
export PYTHONDONTWRITEBYTECODE=1
cd "$ROOT/tests/python"
exec "$VENV/bin/python" -m pytest -v "$@" .
