# Shared by the test runner, the regress runner and the demo: package installation,
# build and install, and PostgreSQL clusters run as the unprivileged postgres user
# (PostgreSQL refuses to run as root) with their own port and socket directory.
# Sourced, not run.

# PG_BIN may name a relocated copy of the PostgreSQL 15 tree (bin/, lib/ and share/ moved
# together), so that several checkouts can install and test side by side.
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PACKAGES=(postgresql-15 postgresql-server-dev-15 libcurl4-openssl-dev libssl-dev libipc-run-perl
          libgtest-dev cmake g++ make python3 perl curl openssl prometheus-postgres-exporter clang-format
          python3-sqlalchemy python3-psycopg2 nodejs postgresql-15-plproxy
          prometheus python3-matplotlib)

log() { printf '\n=== %s\n' "$*"; }

# Installs whichever of the packages are missing (Debian 12, as root).
ensure_packages() {
  local missing=() extra=("$@") p
  for p in "${PACKAGES[@]}" "${extra[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  # Debian's nodejs ships npm as a package of its own; a nodejs that bundles npm conflicts with it.
  command -v npm >/dev/null || missing+=(npm)
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  # The server packages create a default cluster on install; it is not ours, keep it down.
  if command -v pg_lsclusters >/dev/null && pg_lsclusters -h 2>/dev/null | grep -q online; then
    pg_lsclusters -h | awk '$4 == "online" {print $1, $2}' | while read -r v c; do pg_ctlcluster "$v" "$c" stop || true; done
  fi
  # The exporter's package starts its service (on :9187) where systemd runs; the tests run their own.
  if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus-postgres-exporter 2>/dev/null; then
    systemctl stop prometheus-postgres-exporter || true
  fi
  # Prometheus and its node exporter start their services (on :9090, :9100) where systemd
  # runs; the tests run their own.
  for s in prometheus prometheus-node-exporter; do
    if command -v systemctl >/dev/null && systemctl is-active --quiet "$s" 2>/dev/null; then
      systemctl stop "$s" || true
    fi
  done
  return 0
}

build_and_install() {
  log "building and installing pg_outbox"
  make -C "$REPO" -s -j"$(nproc)" PG_CONFIG="$PG_BIN/pg_config" "$@"
  make -C "$REPO" -s install PG_CONFIG="$PG_BIN/pg_config" >/dev/null
}

as_postgres() { runuser -u postgres -- "$@"; }

# A directory the postgres user can read the tests from: the checkout itself when it
# can, a copy otherwise (a checkout under /root is not readable by others).
readable_repo() {
  if as_postgres test -r "$REPO/test/perl/OutboxTest.pm" -a -x "$REPO/test"; then
    echo "$REPO"
  else
    local copy
    copy=$(mktemp -d /tmp/pg_outbox_src.XXXXXX)
    cp -a "$REPO/." "$copy/"
    chown -R postgres: "$copy"
    echo "$copy"
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_cluster DIR [extra postgresql.conf lines...]: initdb + start, sockets in DIR.
start_cluster() {
  local dir=$1
  shift
  mkdir -p "$dir"
  chown postgres: "$dir"
  CLUSTER_DIR=$dir
  CLUSTER_PORT=$(free_port)
  as_postgres "$PG_BIN/initdb" -D "$dir/data" -U postgres -A trust >/dev/null
  {
    echo "port = $CLUSTER_PORT"
    echo "listen_addresses = ''"
    echo "unix_socket_directories = '$dir'"
    echo "shared_preload_libraries = 'pg_outbox'"
    printf '%s\n' "$@"
  } >>"$dir/data/postgresql.conf"
  as_postgres "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
}

stop_cluster() {
  [ -n "${CLUSTER_DIR:-}" ] && [ -f "$CLUSTER_DIR/data/postmaster.pid" ] &&
    as_postgres "$PG_BIN/pg_ctl" -D "$CLUSTER_DIR/data" -m fast -w stop >/dev/null 2>&1
  return 0
}

psql_cluster() { as_postgres "$PG_BIN/psql" -X -q -h "$CLUSTER_DIR" -p "$CLUSTER_PORT" -U postgres "$@"; }
