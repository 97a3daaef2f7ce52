# Shared shell functions: find PostgreSQL, make sure PostGIS is installed, and
# run throwaway or development clusters. Sourced by dev.sh, test.sh and bench.sh.

pg_bindir() {
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$dir" ] || [ ! -x "$dir/initdb" ]; then
        echo "featurepipe: no PostgreSQL server found under /usr/lib/postgresql (apt-get install postgresql)" >&2
        return 1
    fi
    echo "$dir"
}

pg_major() {
    basename "$(dirname "$(pg_bindir)")"
}

# Install PostGIS for the server's major version when it is missing (as root), or say what to install.
ensure_postgis() {
    local major
    major=$(pg_major) || return 1
    ensure_package "/usr/share/postgresql/$major/extension/postgis.control" "postgresql-$major-postgis-3"
}

# ensure_package FILE PACKAGE: install the Debian package with apt-get unless FILE exists.
ensure_package() {
    local file=$1 pkg=$2
    if [ -e "$file" ]; then
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "featurepipe: $pkg is not installed; run as root: apt-get install $pkg" >&2
        return 1
    fi
    echo "featurepipe: installing $pkg with apt-get" >&2
    if [ -z "${apt_updated:-}" ]; then
        apt-get update -q >&2
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$pkg" >&2
}

# PostgreSQL refuses to run as root: as root, run server commands as the postgres user.
as_pg_user() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_cluster DATADIR PORT [fast]: initdb if needed, then start on 127.0.0.1:PORT (TCP only).
# "fast" turns durability off: for throwaway test clusters only.
start_cluster() {
    local data=$1 port=$2 mode=${3:-durable} bin opts
    bin=$(pg_bindir) || return 1
    if [ "$(id -u)" -eq 0 ]; then
        mkdir -p "$data" && chown postgres: "$data"
    fi
    if [ ! -f "$data/PG_VERSION" ]; then
        as_pg_user "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null || return 1
    fi
    opts="-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c max_connections=200"
    if [ "$mode" = fast ]; then
        opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    fi
    as_pg_user "$bin/pg_ctl" -D "$data" -o "$opts" -l "$data/server.log" -w -t 60 start >/dev/null || {
        echo "featurepipe: PostgreSQL did not start; its log:" >&2
        tail -n 20 "$data/server.log" >&2
        return 1
    }
}

stop_cluster() {
    local data=$1 bin
    bin=$(pg_bindir) || return 1
    [ -f "$data/postmaster.pid" ] && as_pg_user "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1
    return 0
}

# psql against the cluster on PORT as the superuser; extra arguments are passed on.
pg_psql() {
    local port=$1
    shift
    "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres "$@"
}

# throwaway_cluster [fast|durable]: a cluster in a new temp dir on a free port,
# stopped and removed when the calling script exits, whatever happens.
# Sets $cluster_dir and $cluster_port.
throwaway_cluster() {
    cluster_dir=$(mktemp -d /tmp/featurepipe-cluster.XXXXXX)
    chmod 755 "$cluster_dir"
    cluster_port=$(free_port)
    trap 'stop_cluster "$cluster_dir/data"; rm -rf "$cluster_dir"' EXIT
    start_cluster "$cluster_dir/data" "$cluster_port" "${1:-durable}"
}
