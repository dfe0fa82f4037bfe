# Shared by bin/virtplane and bin/test: a virtual environment with the package installed.
VENV=${VIRTPLANE_VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3}

ensure_venv() {
  local stamp="$VENV/.virtplane-installed"
  if [ ! -x "$VENV/bin/python" ]; then
    echo "creating the virtual environment in $VENV ..." >&2
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip >&2
  fi
  # reinstall when pyproject.toml changed since the last install
  if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
    echo "installing virtplane and its dependencies ..." >&2
    "$VENV/bin/pip" install -q -e "$ROOT[test,postgres]" >&2
    touch "$stamp"
  fi
}
