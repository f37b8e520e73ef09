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
VENV="${KQUOTA_PYTHON_VENV:-$ROOT/target/python-venv}"   # override only for testing this script
REQS="$ROOT/tests/python/requirements.txt"
PYTHON="${PYTHON:-python3}"

die() {
  echo "tests/python/run.sh: error: $*" >&2
  exit 1
}

command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found; install Python 3 (or set PYTHON=/path/to/python3)"
command -v cargo >/dev/null 2>&1 || die "cargo not found; install a Rust toolchain"

venv_ok() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -m pip --version >/dev/null 2>&1
}

if ! venv_ok; then
  echo "== creating virtualenv in $VENV"
  rm -rf "$VENV"
  if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>&1 || ! venv_ok; then
    # Debian/Ubuntu without python3-venv's ensurepip: make a bare venv and let the system pip
    # install pip into it.
    rm -rf "$VENV"
    if ! { "$PYTHON" -m venv --without-pip "$VENV" &&
           "$PYTHON" -m pip --python "$VENV/bin/python" install --disable-pip-version-check -q pip; } ||
       ! venv_ok; then
      rm -rf "$VENV"
      die "could not create a virtualenv with pip in target/python-venv (tried '$PYTHON -m venv' and '$PYTHON -m venv --without-pip' + '$PYTHON -m pip --python'); install python3-venv or python3-pip"
    fi
  fi
fi

echo "== installing test requirements (kafka-python==3.0.12, pytest, cryptography)"
if ! "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQS"; then
  die "pip could not install the requirements in $REQS into target/python-venv (is PyPI reachable?)"
fi
if ! "$VENV/bin/python" - <<'PY'
import sys
import kafka, pytest, cryptography
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
if kafka.__version__ != "3.0.12":
    sys.exit("kafka-python is %s, expected 3.0.12" % kafka.__version__)
PY
then
  die "the virtualenv does not provide kafka-python 3.0.12, pytest and cryptography; remove target/python-venv and retry"
fi

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
