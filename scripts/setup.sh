#!/usr/bin/env bash
# Prepare a fresh machine for torchbake, idempotently:
#   - Debian packages the real-engine work needs (debootstrap, docker-registry; tmux drives the
#     interactive run-container test through a real terminal, openssl makes the private CA of
#     the TLS tests, skopeo reads the registry's referrers back as a client nobody here wrote,
#     Node.js runs sigstore-js, which verifies torchbake's signatures: tests/js; redis-server is
#     the shared compile-cache store the dev-image tests start on loopback; ninja-build runs the real
#     ninja build whose progress tests/unit/test_compile_progress.py reads; Chromium and its
#     chromedriver show the documentation site as a reader's browser does: tests/unit/test_site_in_a_browser.py),
#   - a running Docker engine >= 26 with buildx (scripts/ensure-engine.sh installs it),
#   - QEMU user emulation for the other platform (scripts/ensure-emulation.sh),
#   - .venv with torchbake and its test tools installed.
# Safe to run any number of times; later runs only check.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then
    missing=()
    for pkg in debootstrap docker-registry tmux openssl skopeo redis-server ninja-build chromium chromium-driver; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    # Node.js runs the verifiers nobody here wrote (sigstore-js, tests/js/)
    command -v npm >/dev/null || missing+=(nodejs npm)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "setup: installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
fi

# QEMU for the other platform's images (linux/arm64 here): build steps that must run on it, its tests.
bash scripts/ensure-emulation.sh

# The engine starts (or is installed) while .venv is filled: neither needs the other.
bash scripts/ensure-engine.sh &
engine=$!

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    # A pip that can install into another environment (pip >= 22.3, --python) fills .venv from
    # outside, pip included: ensurepip's own copy takes 5 to 8 s. Asked with the interpreter's own
    # path: pip cannot find a bare `python3` that is a pyenv shim.
    interpreter=$("$PYTHON" -c 'import sys; print(sys.executable)')
    if "$PYTHON" -m pip --python "$interpreter" --version >/dev/null 2>&1; then
        "$PYTHON" -m venv --without-pip .venv
    else
        "$PYTHON" -m venv .venv
    fi
fi
stamp=.venv/.torchbake-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "setup: installing torchbake into .venv"
    if .venv/bin/python -m pip --version >/dev/null 2>&1; then
        pip=(.venv/bin/python -m pip)
    else  # made --without-pip (and maybe cut short before pip was in): the outer pip installs it
        pip=("$PYTHON" -m pip --python .venv/bin/python)
    fi
    # uv (pinned in [test]) fills .venv in 3 s where pip takes 35 s, from the indexes and constraints
    # pip is configured with (torchbake.inputs.pip_configuration, the standard library only, says
    # them in uv's environment variables, NAME=VALUE one a line); where uv cannot, pip does. An
    # index URL may hold a password: exported (a builtin) in uv's subshell alone, it is on no
    # command line that ps shows.
    uv_pin=$("$PYTHON" -c 'import tomllib; print(next(r for r in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"] if r.startswith("uv==")))')
    if "${pip[@]}" install --quiet --disable-pip-version-check "$uv_pin" \
        && uv_environment=$("${pip[@]}" config list | "$PYTHON" -m torchbake.inputs.pip_configuration) \
        && mapfile -t uv_environment <<<"$uv_environment" \
        && (export "${uv_environment[@]}" && exec .venv/bin/uv pip install --quiet --python .venv/bin/python pip --editable '.[test]'); then
        :
    else
        echo "setup: uv did not fill .venv (above); pip does"
        "${pip[@]}" install --quiet --disable-pip-version-check pip --editable '.[test]'
    fi
    touch "$stamp"
fi
# The installed packages' bytecode, made once an install: where PYTHONDONTWRITEBYTECODE is set (CI
# runners, this project's machines) Python reads bytecode but never writes it, and uv writes none,
# so every `invoke` compiled the 700 modules of its SDKs anew: 1.5 s of a cached build's 4 s of CPU
# (2026-11-29). A file that is not Python 3 (a package's test data) is passed over.
# (Without that variable Python writes each module's bytecode the first time it imports it: nothing to do.)
compiled=.venv/.torchbake-compiled
if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ] && { [ ! -f "$compiled" ] || [ "$stamp" -nt "$compiled" ]; }; then
    echo "setup: compiling .venv's packages to bytecode"
    .venv/bin/python -m compileall -q -j 0 .venv/lib/python3*/site-packages >/dev/null 2>&1 || true
    touch "$compiled"
fi
# torchbake's runtime dependencies as wheels, once per machine and dependency list: the tests
# install torchbake's own wheel from this folder offline, as a team installs it from a wheel folder.
wheels=${TORCHBAKE_DEV_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/torchbake-dev/wheels}
dependencies=$(.venv/bin/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
wheels_stamp="$wheels/.dependencies-$(printf '%s' "$dependencies" | sha256sum | cut -c1-16)"
if [ ! -f "$wheels_stamp" ]; then
    echo "setup: downloading torchbake's dependencies as wheels into $wheels"
    mkdir -p "$wheels"
    printf '%s\n' "$dependencies" > "$wheels/.requirements.txt"
    # `pip wheel`: a dependency published as a source archive only (www-authenticate) becomes a wheel too
    .venv/bin/python -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$wheels" \
        -r "$wheels/.requirements.txt"
    touch "$wheels_stamp"
fi
# The JavaScript judges of the tests (tests/js/package-lock.json: sigstore-js), pinned.
if [ ! -f tests/js/node_modules/.package-lock.json ] || [ tests/js/package-lock.json -nt tests/js/node_modules/.package-lock.json ]; then
    echo "setup: installing the test verifiers of tests/js"
    npm ci --prefix tests/js --silent --no-audit --no-fund
fi
if ! wait "$engine"; then
    echo "setup: no Docker engine answers (scripts/ensure-engine.sh said why, above)." >&2
    exit 1
fi
echo "setup: ready (.venv/bin/invoke --list shows the tasks)"
