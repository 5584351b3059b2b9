#!/usr/bin/env bash
# Installs DuckDB's Python package into its own virtual environment under
# .data/duckdb/venv, for the tests that query `seqflow export`'s Parquet files
# (internal/export TestExportSurvivesKill9) and for trying the queries of
# docs/export.md. Idempotent: does nothing when the pinned version is there.
# Prints the interpreter's path on its last line.
#
#   install-duckdb.sh            install (as root, installs python3-venv from Debian if missing)
#
# The tests find the interpreter at .data/duckdb/venv/bin/python, or at
# SEQFLOW_DUCKDB_PYTHON.
set -euo pipefail

DUCKDB_VERSION=2.0.1

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/../.." && pwd)
VENV=$REPO/.data/duckdb/venv
PY=$VENV/bin/python

have() { [ -x "$PY" ] && "$PY" -c "import duckdb, sys; sys.exit(duckdb.__version__ != '$DUCKDB_VERSION')" 2>/dev/null; }

if have; then
  echo "$PY"
  exit 0
fi
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q python3-venv >&2 || { apt-get update -q >&2 && apt-get install -y -q python3-venv >&2; }
  else
    echo "install-duckdb: python3 has no venv module; install python3-venv" >&2
    exit 1
  fi
fi
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
python3 -m venv "$VENV" >&2
"$PY" -m pip install -q --disable-pip-version-check "duckdb==$DUCKDB_VERSION" >&2
have || { echo "install-duckdb: duckdb $DUCKDB_VERSION did not import" >&2; exit 1; }
echo "$PY"
