#!/usr/bin/env bash
# Helpers shared by the scripts in this folder. Source it; it defines functions only.
#
#   ensure_cargo            exits 1 with advice when `cargo` is missing
#   ensure_server_binaries  installs MariaDB's server binaries when no `mariadbd`/`mysqld`
#                           exists (the tests start throwaway servers from them); installs
#                           nothing when the variable named by its argument holds a URL
#   ensure_postgres_binaries  the same for PostgreSQL: installs Debian's `postgresql` when
#                           no folder holds both `initdb` and `postgres`, unless the variable
#                           named by its argument (JOBQUEUE_TEST_POSTGRES_URL) holds a URL
#   ensure_browser          installs Debian's `chromium` and `chromium-driver` when either is
#                           missing (the dashboard's browser tests drive them)
#   require_packaged        checks that a crate's package carries the files it embeds
#   package_cargo_home      makes a CARGO_HOME for `cargo package` that shares everything with
#                           the user's but the unpacked sources of local registries
set -euo pipefail

# Where a server binary may be besides PATH (distributions put it in sbin, which is often
# not on a user's PATH; the official MySQL tarball goes to /usr/local/mysql).
JOBQUEUE_SERVER_DIRS=(/usr/sbin /usr/local/sbin /usr/local/mysql/bin)

# Where PostgreSQL's binaries may be besides PATH and Debian's versioned folders
# (/usr/lib/postgresql/<version>/bin): a build from source.
JOBQUEUE_POSTGRES_DIRS=(/usr/local/pgsql/bin)

jq_say() {
  printf '%s\n' "$*" >&2
}

# Prints the path of the first `mariadbd` (preferred) or `mysqld` found, or fails.
find_server_binary() {
  local name dir
  local -a dirs
  IFS=: read -r -a dirs <<<"${PATH:-}"
  dirs+=("${JOBQUEUE_SERVER_DIRS[@]}")
  for name in mariadbd mysqld; do
    for dir in "${dirs[@]}"; do
      if [[ -n "$dir" && -f "$dir/$name" && -x "$dir/$name" ]]; then
        printf '%s\n' "$dir/$name"
        return 0
      fi
    done
  done
  return 1
}

server_install_advice() {
  jq_say "The tests start throwaway MariaDB/MySQL servers of their own and need the server binaries."
  jq_say "Install them:"
  jq_say "  Debian/Ubuntu: sudo apt-get install mariadb-server"
  jq_say "  macOS:         brew install mariadb"
  jq_say "  others:        the distribution's MariaDB server package (it must provide mariadbd"
  jq_say "                 and mariadb-install-db), or MySQL 8.0's mysqld"
  jq_say "There is no need to start the installed service: the tests start their own servers."
}

# Prints the first folder holding both `initdb` and `postgres` (the tests run the `postgres`
# beside `initdb`), searching PATH, then /usr/lib/postgresql/<version>/bin newest version
# first, then JOBQUEUE_POSTGRES_DIRS; or fails.
find_postgres_binaries() {
  local dir
  local -a dirs versioned=()
  IFS=: read -r -a dirs <<<"${PATH:-}"
  if [[ -d /usr/lib/postgresql ]]; then
    mapfile -t versioned < <(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -type d -name '[0-9]*' | sort -rV)
  fi
  for dir in ${versioned[@]+"${versioned[@]}"}; do
    dirs+=("$dir/bin")
  done
  dirs+=("${JOBQUEUE_POSTGRES_DIRS[@]}")
  for dir in "${dirs[@]}"; do
    if [[ -n "$dir" && -f "$dir/initdb" && -x "$dir/initdb" && -f "$dir/postgres" && -x "$dir/postgres" ]]; then
      printf '%s\n' "$dir"
      return 0
    fi
  done
  return 1
}

postgres_install_advice() {
  jq_say "The PostgreSQL tests start throwaway PostgreSQL servers (13 or newer) of their own and need"
  jq_say "PostgreSQL's server binaries, initdb and postgres. Install them:"
  jq_say "  Debian/Ubuntu: sudo apt-get install postgresql"
  jq_say "  macOS:         brew install postgresql"
  jq_say "or use an existing server (the tests create databases named jqtest_* on it):"
  jq_say "  export JOBQUEUE_TEST_POSTGRES_URL=postgres://user:pass@host:port/postgres"
  jq_say "There is no need to start the installed service: the tests start their own servers."
}

# Sets JQ_AS_ROOT to what runs a command as root: nothing for root, else sudo (sudo -n
# without a terminal, where nobody can type a password: fail at once rather than hang).
# Fails when neither root nor sudo is at hand.
jq_as_root() {
  JQ_AS_ROOT=()
  if [[ $(id -u) != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || return 1
    if [[ -t 0 ]]; then JQ_AS_ROOT=(sudo); else JQ_AS_ROOT=(sudo -n); fi
  fi
}

# Runs apt-get to install the package $1 (mariadb-server, postgresql), as root directly or
# through sudo (the rest, "${@:2}", is the prefix: empty, or sudo with its options). The
# package's own service is kept from starting, through the policy-rc.d hook Debian provides
# for that, unless such a hook already exists.
apt_install_server() {
  local package=$1
  shift
  local policy=/usr/sbin/policy-rc.d added_policy=0 status=0
  if ! "$@" test -e "$policy"; then
    "$@" sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy"
    added_policy=1
  fi
  {
    "$@" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
      "$@" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$package"
  } || status=$?
  if [[ $added_policy == 1 ]]; then
    "$@" rm -f "$policy"
  fi
  return "$status"
}

# With an argument, the name of a variable (DATABASE_URL, JOBQUEUE_TEST_DATABASE_URL): when
# it is set, the server it names is used and nothing is installed; a second argument is
# printed then, to say what still needs a binary.
ensure_server_binaries() {
  local found url_var=${1:-}
  if found=$(find_server_binary); then
    return 0
  fi
  if [[ -n "$url_var" && -n "${!url_var:-}" ]]; then
    jq_say "Using the server $url_var names; no server binary installed.${2:+ $2}"
    return 0
  fi
  jq_say "No MariaDB/MySQL server binary (mariadbd or mysqld) on PATH or in ${JOBQUEUE_SERVER_DIRS[*]}."
  local -a as_root=()
  if [[ $(id -u) != 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
      server_install_advice
      exit 1
    fi
    # Without a terminal nobody can type a password: fail at once rather than hang.
    if [[ -t 0 ]]; then as_root=(sudo); else as_root=(sudo -n); fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    jq_say "This is not a Debian/Ubuntu system (no apt-get), so nothing was installed."
    server_install_advice
    exit 1
  fi
  jq_say "Installing mariadb-server with apt-get${as_root[0]+ through sudo}: the tests start throwaway servers from its binaries (set ${url_var:-JOBQUEUE_TEST_DATABASE_URL} to a server's URL to use that server instead)..."
  if ! apt_install_server mariadb-server ${as_root[@]+"${as_root[@]}"}; then
    jq_say "Installing mariadb-server failed."
    server_install_advice
    exit 1
  fi
  if ! found=$(find_server_binary); then
    jq_say "mariadb-server was installed but no mariadbd or mysqld can be found."
    server_install_advice
    exit 1
  fi
  jq_say "Using $found."
}

# ensure_server_binaries for PostgreSQL. With an argument, the name of a variable
# (JOBQUEUE_TEST_POSTGRES_URL): when it is set, the server it names is used and nothing is
# installed; a second argument is printed then, to say what still needs the binaries.
ensure_postgres_binaries() {
  local found url_var=${1:-}
  if found=$(find_postgres_binaries); then
    return 0
  fi
  if [[ -n "$url_var" && -n "${!url_var:-}" ]]; then
    jq_say "Using the PostgreSQL server $url_var names; no PostgreSQL binaries installed.${2:+ $2}"
    return 0
  fi
  jq_say "No folder with PostgreSQL's initdb and postgres on PATH, in /usr/lib/postgresql/<version>/bin or in ${JOBQUEUE_POSTGRES_DIRS[*]}."
  if ! jq_as_root; then
    postgres_install_advice
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    jq_say "This is not a Debian/Ubuntu system (no apt-get), so nothing was installed."
    postgres_install_advice
    exit 1
  fi
  jq_say "Installing postgresql with apt-get${JQ_AS_ROOT[0]+ through sudo}: the tests start throwaway servers from its binaries (set ${url_var:-JOBQUEUE_TEST_POSTGRES_URL} to a server's URL to use that server instead)..."
  if ! apt_install_server postgresql ${JQ_AS_ROOT[@]+"${JQ_AS_ROOT[@]}"}; then
    jq_say "Installing postgresql failed."
    postgres_install_advice
    exit 1
  fi
  if ! found=$(find_postgres_binaries); then
    jq_say "postgresql was installed but no folder holds both initdb and postgres."
    postgres_install_advice
    exit 1
  fi
  jq_say "Using $found/postgres."
}

# Headless Chromium and its WebDriver, for the dashboard's browser tests.
ensure_browser() {
  if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    return 0
  fi
  jq_say "No chromium or chromedriver on PATH: the dashboard's browser tests need both."
  local -a as_root=()
  if [[ $(id -u) != 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
      jq_say "Install them: sudo apt-get install chromium chromium-driver"
      exit 1
    fi
    if [[ -t 0 ]]; then as_root=(sudo); else as_root=(sudo -n); fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    jq_say "This is not a Debian/Ubuntu system (no apt-get): install Chromium and its chromedriver."
    exit 1
  fi
  jq_say "Installing chromium and chromium-driver with apt-get${as_root[0]+ through sudo}: the dashboard's browser tests drive them (needed even with a database URL)..."
  if ! { ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
    ${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver; }; then
    jq_say "Installing chromium and chromium-driver failed; install them by hand."
    exit 1
  fi
}

ensure_cargo() {
  if command -v cargo >/dev/null 2>&1; then
    return 0
  fi
  # rustup's default place, for shells that have not loaded its environment.
  if [[ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]]; then
    export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
    return 0
  fi
  jq_say "cargo was not found. Install Rust (1.85 or newer) with rustup, https://rustup.rs,"
  jq_say "then open a new shell or run: . \"\$HOME/.cargo/env\""
  exit 1
}

# require_packaged CRATE DIR GLOB: fails unless the package of CRATE (as `cargo package`
# lists it) carries every file matching GLOB under CRATE/DIR, which the crate embeds.
require_packaged() {
  local crate=$1 dir=$2 glob=$3 listed missing
  listed=$(cargo package --allow-dirty --no-verify --list -p "$crate")
  missing=$(cd "$crate" && find -L "$dir" -name "$glob" -type f | sort | while read -r f; do
    grep -qxF "$f" <<<"$listed" || printf '%s\n' "$f"
  done)
  if [[ -n "$missing" ]]; then
    jq_say "The package of $crate lacks files it embeds:" "$missing"
    return 1
  fi
}

# Prints the path of a new CARGO_HOME for `cargo package`, to remove after use. Its
# verification builds each crate against the others through a local registry, whose
# sources cargo unpacks once per path and version under $CARGO_HOME/registry/src/-<hash>/
# and never refreshes: a second run from the same folder would build the first run's code.
# This home links to everything of the user's (configuration, index, downloaded crates and
# their unpacked sources, locks), so nothing is downloaded again, except those local
# registries' unpacked sources, which start empty each time and go with the folder. Nothing
# inside the user's CARGO_HOME is removed.
package_cargo_home() {
  local real=${CARGO_HOME:-$HOME/.cargo} home entry name
  home=$(mktemp -d "${TMPDIR:-/tmp}/jobqueue-package-home.XXXXXX")
  mkdir -p "$home/registry/src"
  shopt -s nullglob dotglob
  for entry in "$real"/*; do
    name=${entry##*/}
    [[ $name == registry ]] || ln -s "$entry" "$home/$name"
  done
  for entry in "$real"/registry/*; do
    name=${entry##*/}
    [[ $name == src ]] || ln -s "$entry" "$home/registry/$name"
  done
  for entry in "$real"/registry/src/*; do
    name=${entry##*/}
    [[ $name == -* ]] || ln -s "$entry" "$home/registry/src/$name"
  done
  shopt -u nullglob dotglob
  printf '%s\n' "$home"
}
