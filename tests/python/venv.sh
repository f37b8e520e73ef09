# Sourced by tests/python/run.sh and tests/kafka/run.sh: makes sure the shared virtualenv exists and holds
# tests/python/requirements.txt. Expects ROOT, PYTHON and a `die` function; sets VENV.
VENV="${KQUOTA_PYTHON_VENV:-$ROOT/target/python-venv}"   # override only for testing the scripts
REQS="$ROOT/tests/python/requirements.txt"

command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found; install Python 3 (or set PYTHON=/path/to/python3)"

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
      die "could not create a virtualenv with pip in $VENV (tried '$PYTHON -m venv' and '$PYTHON -m venv --without-pip' + '$PYTHON -m pip --python'); install python3-venv or python3-pip"
    fi
  fi
fi

echo "== installing test requirements (kafka-python==3.0.12, pytest, cryptography, confluent-kafka)"
if ! "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQS"; then
  die "pip could not install the requirements in $REQS into $VENV (is PyPI reachable?)"
fi
if ! "$VENV/bin/python" - <<'PY'
import sys
import kafka, pytest, cryptography
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
if kafka.__version__ != "3.0.12":
    sys.exit("kafka-python is %s, expected 3.0.12" % kafka.__version__)
import confluent_kafka
if confluent_kafka.__version__ != "2.16.1":
    sys.exit("confluent-kafka is %s, expected 2.16.1" % confluent_kafka.__version__)
# Its librdkafka must have TLS and SCRAM built in (configuring them fails otherwise).
confluent_kafka.Producer({"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SASL_SSL",
                          "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p", "log_level": 0})
PY
then
  die "the virtualenv does not provide kafka-python 3.0.12, pytest, cryptography and confluent-kafka; remove $VENV and retry"
fi
