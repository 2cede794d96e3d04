# Shared by scripts/serve and scripts/test: installs what the build and the tests need when it
# is missing (Debian/Ubuntu). apt-get runs only as root; otherwise we say what to install.

# Every build of this repository enables the package's optional traits (ServiceLifecycleSupport,
# MetricsSupport): the examples run their servers in a ServiceGroup and the tests cover both.
SWIFT_TRAITS=(--enable-all-traits)

# Each message carries the minutes and seconds since the outermost script started (scripts the
# test script runs inherit its start), so a CI log shows what each stage took.
: "${SWITCHBOARD_SCRIPT_START:=$(date +%s)}"
export SWITCHBOARD_SCRIPT_START
say() {
    local elapsed=$(( $(date +%s) - SWITCHBOARD_SCRIPT_START ))
    printf '==> [%d:%02d] %s\n' $(( elapsed / 60 )) $(( elapsed % 60 )) "$*" >&2
}

apt_install() {
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
            return
        fi
        say "missing packages: $*"
        say "install them with: sudo apt-get install -y $*   (then re-run this command)"
        exit 1
    fi
    if [ -z "${SWITCHBOARD_APT_UPDATED:-}" ]; then
        apt-get update -qq
        export SWITCHBOARD_APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# OpenSSL headers and pkg-config, needed to build the library.
ensure_build_deps() {
    local missing=()
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    if ! pkg-config --exists openssl 2>/dev/null && [ ! -f /usr/include/openssl/ssl.h ]; then
        missing+=(libssl-dev)
    fi
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    # zlib, for permessage-deflate.
    if ! pkg-config --exists zlib 2>/dev/null && [ ! -f /usr/include/zlib.h ]; then
        missing+=(zlib1g-dev)
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]}"
        apt_install "${missing[@]}"
    fi
}

# SQLite headers, for the chat-room example's persistent history.
ensure_sqlite() {
    if [ ! -f /usr/include/sqlite3.h ]; then
        say "installing libsqlite3-dev"
        apt_install libsqlite3-dev
    fi
}

# Python 3 with the `websockets` package (>= 13, asyncio API): the independent peer of the
# interop tests.
ensure_python_websockets() {
    if ! command -v python3 >/dev/null 2>&1; then
        say "installing python3"
        apt_install python3 python3-pip
    fi
    if python3 -c 'import sys, websockets; sys.exit(0 if int(websockets.__version__.split(".")[0]) >= 13 else 1)' 2>/dev/null; then
        return
    fi
    if ! python3 -m pip --version >/dev/null 2>&1; then
        say "installing python3-pip"
        apt_install python3-pip
    fi
    say "installing Python websockets"
    python3 -m pip install -q --disable-pip-version-check "websockets>=13" 2>/dev/null \
        || python3 -m pip install -q --disable-pip-version-check --break-system-packages "websockets>=13" \
        || python3 -m pip install -q --disable-pip-version-check --user --break-system-packages "websockets>=13"
}

# proxy.py (PyPI `proxy.py`, module `proxy`, >= 2.4): the real HTTP CONNECT proxy, with and
# without Basic auth, of the client's proxy tests. Needs python3 and pip (ensure_python_websockets).
ensure_python_proxy() {
    if python3 -c 'import sys, proxy.common.version as v; sys.exit(0 if tuple(map(int, v.__version__.split(".")[:2])) >= (2, 4) else 1)' 2>/dev/null; then
        return
    fi
    say "installing Python proxy.py"
    python3 -m pip install -q --disable-pip-version-check "proxy.py>=2.4" 2>/dev/null \
        || python3 -m pip install -q --disable-pip-version-check --break-system-packages "proxy.py>=2.4" \
        || python3 -m pip install -q --disable-pip-version-check --user --break-system-packages "proxy.py>=2.4"
}

# PyJWT (>= 2.4, with `cryptography` for RS*/PS*/ES*/EdDSA): the independent issuer of the
# JWT tests' tokens. From PyPI: the python3 on PATH is not always Debian's (whose python3-jwt
# would serve only /usr/bin/python3). Needs python3 and pip (ensure_python_websockets).
ensure_python_jwt() {
    if python3 -c 'import sys, jwt, cryptography; sys.exit(0 if tuple(map(int, jwt.__version__.split(".")[:2])) >= (2, 4) else 1)' 2>/dev/null; then
        return
    fi
    say "installing Python PyJWT and cryptography"
    python3 -m pip install -q --disable-pip-version-check "PyJWT>=2.4" cryptography 2>/dev/null \
        || python3 -m pip install -q --disable-pip-version-check --break-system-packages "PyJWT>=2.4" cryptography \
        || python3 -m pip install -q --disable-pip-version-check --user --break-system-packages "PyJWT>=2.4" cryptography
}

# Python's redis client (redis-py): a publisher nobody here wrote, for the tests of the documented
# backplane envelope (a backend in another language publishing into topics and rooms).
ensure_python_redis() {
    if python3 -c 'import redis' 2>/dev/null; then
        return
    fi
    say "installing Python redis"
    python3 -m pip install -q --disable-pip-version-check "redis>=4" 2>/dev/null \
        || python3 -m pip install -q --disable-pip-version-check --break-system-packages "redis>=4" \
        || python3 -m pip install -q --disable-pip-version-check --user --break-system-packages "redis>=4"
}

# PyPI's prometheus-client: its text-format parser checks the examples' /metrics.
ensure_python_prometheus() {
    if python3 -c 'import prometheus_client.parser' 2>/dev/null; then
        return
    fi
    say "installing Python prometheus-client"
    python3 -m pip install -q --disable-pip-version-check prometheus-client 2>/dev/null \
        || python3 -m pip install -q --disable-pip-version-check --break-system-packages prometheus-client \
        || python3 -m pip install -q --disable-pip-version-check --user --break-system-packages prometheus-client
}

# A real Redis server (Debian's redis-server, which brings redis-cli from redis-tools): the peer
# of the Redis client and backplane tests, which start their own servers on ephemeral ports.
# Only the binaries matter: no system service is started or enabled here.
ensure_redis() {
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        say "installing redis-server"
        apt_install redis-server
    fi
}

# Headless Chromium, its WebDriver and Python selenium: the real browser of the chat-room test.
ensure_browser() {
    local missing=()
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]}"
        apt_install "${missing[@]}"
    fi
    if ! python3 -c 'import selenium' 2>/dev/null; then
        say "installing Python selenium"
        python3 -m pip install -q --disable-pip-version-check selenium 2>/dev/null \
            || python3 -m pip install -q --disable-pip-version-check --break-system-packages selenium
    fi
}

# Whether the io_uring event loop can run here: echo-server (built) starts on it and listens.
io_uring_available() {
    local bin log pid ok=1
    bin=$(swift build "${SWIFT_TRAITS[@]}" --show-bin-path)
    [ -x "$bin/echo-server" ] || return 1
    log=$(mktemp)
    SWITCHBOARD_EVENT_LOOP=io_uring "$bin/echo-server" --port 0 > "$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
        if grep -q listening "$log"; then ok=0; break; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$log"
    return $ok
}
