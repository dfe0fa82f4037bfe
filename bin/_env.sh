# Shared by bin/virtplane, bin/bench and bin/test: one virtual environment (.venv) with the package
# installed. The server and the CLI need only the runtime set (pyproject's dependencies);
# ./bin/test adds the test tools to the same environment when they are missing (a second stamp).
VENV=${VIRTPLANE_VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3}

# _install STAMP SPEC: pip install -e SPEC unless STAMP is newer than pyproject.toml
_install() {
  local stamp="$VENV/$1" spec=$2
  if [ ! -x "$VENV/bin/python" ]; then
    echo "creating the virtual environment in $VENV ..." >&2
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip >&2
  fi
  # reinstall when pyproject.toml changed since the last install
  if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
    echo "installing virtplane$spec and its dependencies ..." >&2
    "$VENV/bin/pip" install -q -e "$ROOT$spec" >&2
    touch "$stamp"
  fi
}

# the server and the CLI: the runtime dependencies only (no extras)
ensure_venv() {
  _install .virtplane-installed ""
}

# ./bin/test: the runtime set plus the test tools and PostgreSQL's driver
ensure_test_venv() {
  ensure_venv && _install .virtplane-test-installed "[test,postgres]"
}
