#!/usr/bin/env bash
# `make image-check` (opt-in, not part of `make test`; issue 28): build the
# Dockerfile with podman and check the image it makes, then run
# docker-compose.yml with podman-compose, on a machine with no Docker daemon
# and no registry of images.
#
# 1. Stand-ins for the base images, which cannot be pulled here: root
#    filesystems made by debootstrap (Debian bookworm, minbase), cached
#    outside the repo in $FEATUREPIPE_IMAGE_CACHE (default
#    /var/cache/featurepipe/image-stand-ins), `podman import`ed under the
#    names the Dockerfiles use: docker.io/library/debian:bookworm-slim, and
#    docker.io/library/rust:1-bookworm (the same plus gcc and the C headers,
#    this machine's Rust toolchain and this machine's CA bundle, without which
#    cargo in the container cannot reach crates.io). Imported again only when
#    the toolchain or the CA bundle here change.
# 2. `podman build --format docker --network host --pull=never` of the
#    Dockerfile (docker format: the OCI format drops HEALTHCHECK), niced, from
#    a snapshot of the working tree (the files git tracks or would, taken once
#    at the start: edits made during the run do not change what is built), or
#    of the commit FEATUREPIPE_IMAGE_REV names (e.g. HEAD).
# 3. A throwaway PostgreSQL + PostGIS cluster here (scripts/pg.sh) with the
#    demo table (scripts/demo.sql); the image runs with --network host
#    against it, listening on a free port of 127.0.0.1, authentication off.
#    Checked: GET /readyz is 200, a POST of two points is 201 with two ids,
#    a GET of each returns it, the HEALTHCHECK passes in the container (and
#    fails when nothing listens where it asks), and the service is not root.
# 4. docker-compose.yml with Debian's podman-compose (1.0.3): built (both
#    images), brought up on a network of its own, and the same requests sent
#    through its published port, so through PgBouncer in transaction mode;
#    every service's health check run. postgis/postgis:15-3.4 cannot be
#    pulled: its stand-in is Debian's PostgreSQL 15 and PostGIS 3.3 with an
#    entrypoint that does what the file asks of the real one (POSTGRES_*,
#    /docker-entrypoint-initdb.d). The file is run as written but for the
#    published port (a free one of 127.0.0.1, not 8080) and absolute paths
#    into the snapshot. FEATUREPIPE_IMAGE_NO_COMPOSE=1 skips this step.
#
# Needs root (podman as root, debootstrap). Installs podman, runc,
# debootstrap, podman-compose and PostGIS with apt-get when missing. The
# containers, the compose project's network and volume, and the cluster are
# removed on exit, whatever happens; so are the run's files, unless the run
# failed or FEATUREPIPE_IMAGE_KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh

cache=${FEATUREPIPE_IMAGE_CACHE:-/var/cache/featurepipe/image-stand-ins}
mirror=${FEATUREPIPE_IMAGE_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
image=localhost/featurepipe:image-check
slim_name=docker.io/library/debian:bookworm-slim
rust_name=docker.io/library/rust:1-bookworm
postgis_name=docker.io/postgis/postgis:15-3.4
# What the build stage's stand-in adds to minbase: what rust:1-bookworm
# (buildpack-deps) has that a cargo build of this crate uses (cc for ring,
# mimalloc and zstd; git and curl as cargo's helpers).
rust_packages=gcc,libc6-dev,make,pkg-config,ca-certificates,git,curl
# Fixed names, so that a run cleans up after one that was killed.
ctr=featurepipe-image-check
project=featurepipe-image-check
t0=$(date +%s)

say() { echo "image-check: $*" >&2; }
die() {
    say "FAILED: $*"
    exit 1
}
elapsed() { echo "$(($(date +%s) - $1)) s"; }
# Any command that fails unexpectedly says so, and where.
set -o errtrace
trap 'say "FAILED: line $LINENO: $BASH_COMMAND"' ERR

if [ "$(id -u)" -ne 0 ]; then
    die "needs root (podman runs containers as root here, debootstrap)"
fi
ensure_package /usr/bin/podman podman
ensure_package /usr/sbin/runc runc
ensure_package /usr/sbin/debootstrap debootstrap
if [ -z "${FEATUREPIPE_IMAGE_NO_COMPOSE:-}" ]; then
    ensure_package /usr/bin/podman-compose podman-compose
fi
ensure_postgis
command -v rustc >/dev/null || die "no rustc on PATH: the build stage's stand-in carries this machine's toolchain"
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca_bundle" ] || die "no CA bundle at $ca_bundle (cargo in the container needs it to reach crates.io)"

mkdir -p "$cache"
# One run at a time: a second one waits for the first.
exec 9> "$cache.lock"
if ! flock -n 9; then
    say "another image-check is running; waiting for it"
    flock 9
fi

# Podman's settings for this machine, for this script only (CONTAINERS_CONF
# replaces /etc/containers/containers.conf): runc, because crun refuses this
# cgroup v1 host (issue 28); cgroupfs, as there is no systemd; no default
# ulimits (podman's open-files limit is above this machine's hard limit, and
# runc's setrlimit is refused: "error setting rlimit type 7"). Containers also
# run --cgroups=enabled.
cat > "$cache/containers.conf" <<'EOF'
# Written by scripts/image-check.sh (make image-check).
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF=$cache/containers.conf

# The run's files, and the cleanup of everything the run starts.
run=$(mktemp -d /tmp/featurepipe-image-check.XXXXXX)
cluster_dir=
ok=
remove_containers() {
    local c
    podman rm -f -t 5 "$ctr" >/dev/null 2>&1 || true
    for c in $(podman ps -a -q --filter "label=io.podman.compose.project=$project" 2>/dev/null); do
        podman rm -f -t 5 "$c" >/dev/null 2>&1 || true
    done
    podman network rm -f "${project}_default" >/dev/null 2>&1 || true
    podman volume rm -f "${project}_pgdata" >/dev/null 2>&1 || true
}
cleanup() {
    local rc=$?
    remove_containers
    if [ -n "$cluster_dir" ]; then
        stop_cluster "$cluster_dir/data"
        rm -rf "$cluster_dir"
    fi
    if [ "$rc" -ne 0 ] || [ -z "$ok" ] || [ -n "${FEATUREPIPE_IMAGE_KEEP:-}" ]; then
        say "the run's files (build logs, container logs, answers): $run"
    else
        rm -rf "$run"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
remove_containers

# The build context: the working tree as it is now, the files git tracks and
# those it does not ignore (so no target/), deleted ones left out; or, with
# FEATUREPIPE_IMAGE_REV, that commit's files.
if [ -n "${FEATUREPIPE_IMAGE_REV:-}" ]; then
    rev=$(git rev-parse --short --verify "$FEATUREPIPE_IMAGE_REV^{commit}" 2>/dev/null) || die "FEATUREPIPE_IMAGE_REV=$FEATUREPIPE_IMAGE_REV is not a commit"
    git archive --prefix=context/ "$rev" | tar -C "$run" -xf -
    say "build context: commit $rev (FEATUREPIPE_IMAGE_REV), in $run/context"
else
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done |
        tar --null -T - -cf - | tar -C "$run" --one-top-level=context -xf -
    say "build context: a snapshot of the working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . && echo ", clean" || echo " with uncommitted changes")) in $run/context"
fi

# debootstrap_rootfs DIR [PACKAGES]: a Debian bookworm minbase root
# filesystem in DIR, with PACKAGES (comma-separated) and their dependencies,
# made once; apt's sources as in Debian's images.
debootstrap_rootfs() {
    local dir=$1 include=${2:-} start
    if [ -f "$dir/.featurepipe-debootstrap-done" ]; then
        return 0
    fi
    start=$(date +%s)
    # A debootstrap that stopped half-way leaves no marker: start again.
    if [ -e "$dir" ]; then
        say "removing an unfinished root filesystem at $dir"
        rm -rf --one-file-system "$dir"
    fi
    say "debootstrap $suite (minbase${include:+ + $include}) into $dir, from $mirror (once)"
    if ! debootstrap --variant=minbase ${include:+"--include=$include"} "$suite" "$dir" "$mirror" > "$dir.log" 2>&1; then
        tail -n 20 "$dir.log" >&2
        die "debootstrap failed (its log: $dir.log)"
    fi
    rm -f "$dir/etc/apt/sources.list"
    cat > "$dir/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    # As in Debian's images: no package files, no package lists.
    find "$dir/var/cache/apt/archives" "$dir/var/lib/apt/lists" -maxdepth 1 -type f -delete
    date -u +%FT%TZ > "$dir/.featurepipe-debootstrap-done"
    say "root filesystem $dir made in $(elapsed "$start") ($(du -sh --one-file-system "$dir" | cut -f1))"
}

# add_toolchain DIR: this machine's Rust toolchain (rustc, cargo, their
# libraries; not the docs) where rust:1-bookworm has it: under
# /usr/local/rustup/toolchains, called from /usr/local/cargo/bin (on PATH).
# And this machine's CA bundle. The toolchain is copied again when it changed.
add_toolchain() {
    local dir=$1 sysroot triple version tc want part bin
    sysroot=$(rustc --print sysroot)
    triple=$(rustc -vV | sed -n 's/^host: //p')
    version=$(rustc -vV | sed -n 's/^release: //p')
    tc=$version-$triple
    want="$(rustc -vV | tr '\n' ' ')from $sysroot"
    if [ "$(cat "$dir/.featurepipe-toolchain" 2>/dev/null)" != "$want" ]; then
        say "copying the Rust toolchain ($sysroot, rustc $version) into $dir/usr/local/rustup"
        rm -rf "$dir/usr/local/rustup" "$dir/usr/local/cargo"
        mkdir -p "$dir/usr/local/rustup/toolchains/$tc" "$dir/usr/local/cargo/bin"
        for part in bin lib libexec etc; do
            if [ -d "$sysroot/$part" ]; then
                cp -a "$sysroot/$part" "$dir/usr/local/rustup/toolchains/$tc/"
            fi
        done
        for bin in "$dir/usr/local/rustup/toolchains/$tc/bin/"*; do
            ln -s "/usr/local/rustup/toolchains/$tc/bin/${bin##*/}" "$dir/usr/local/cargo/bin/${bin##*/}"
        done
        echo "$want" > "$dir/.featurepipe-toolchain"
    fi
    echo "$version" > "$dir/.featurepipe-rust-version"
    cp "$ca_bundle" "$dir/etc/ssl/certs/ca-certificates.crt"
    sha256sum < "$ca_bundle" > "$dir/.featurepipe-ca-bundle"
}

# import_standin DIR NAME CHANGE...: `podman import` DIR as the image NAME,
# with Dockerfile instructions CHANGE, unless NAME is already DIR as it is
# now (a label holds a digest of DIR's markers: when it was made, the
# toolchain and CA bundle it carries).
import_standin() {
    local dir=$1 name=$2 stamp have old c
    shift 2
    stamp=$(cat "$dir"/.featurepipe-* "$cache/containers.conf" | sha256sum | cut -c1-16)
    have=$(podman image inspect --format '{{index .Labels "featurepipe.stand-in"}}' "$name" 2>/dev/null || true)
    if [ "$have" = "$stamp" ]; then
        say "stand-in $name: up to date (from $dir)"
        return 0
    fi
    old=$(podman image inspect --format '{{.Id}}' "$name" 2>/dev/null || true)
    say "podman import $dir as $name"
    local args=(--change "LABEL featurepipe.stand-in=$stamp")
    for c in "$@"; do
        args+=(--change "$c")
    done
    tar --numeric-owner --exclude='./.featurepipe-*' -C "$dir" -cf - . | podman import -q "${args[@]}" - "$name" >/dev/null
    if [ -n "$old" ]; then
        podman rmi "$old" >/dev/null 2>&1 || true
    fi
}

# build LOG ARGS...: a niced `podman build ARGS` in the docker format, with
# the host's network and no pulls; its steps shown, its whole output in LOG.
build() {
    local log=$1 rc
    shift
    set +e
    nice -n 10 podman build --format docker --network host --pull=never "$@" 2>&1 | tee "$log" |
        grep --line-buffered -E '^(\[[0-9]+/[0-9]+\] )?STEP [0-9]+/[0-9]+:|Using cache|Finished .* target' |
        sed -u 's/^/    /' >&2
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" -ne 0 ]; then
        tail -n 30 "$log" >&2
        die "podman build $* failed (its log: $log)"
    fi
}

# The stand-in for postgis/postgis:15-3.4, for the compose file's db:
# Debian's PostgreSQL 15 and PostGIS on the bookworm-slim stand-in, and an
# entrypoint doing what docker-compose.yml asks of the real image's.
postgis_standin() {
    local dir=$cache/postgis-15-3.4 stamp have
    mkdir -p "$dir"
    cat > "$dir/Dockerfile" <<'EOF'
# Written by scripts/image-check.sh: a stand-in for postgis/postgis:15-3.4.
FROM debian:bookworm-slim
RUN mkdir -p /etc/postgresql-common/createcluster.d \
    && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/stand-in.conf \
    && apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 postgresql-15-postgis-3 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /docker-entrypoint-initdb.d
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data
COPY docker-entrypoint.sh /usr/local/bin/
COPY 10_postgis.sh /docker-entrypoint-initdb.d/
ENTRYPOINT ["docker-entrypoint.sh"]
STOPSIGNAL SIGINT
EXPOSE 5432
CMD ["postgres"]
EOF
    cat > "$dir/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
# The part of the postgres image's entrypoint that docker-compose.yml uses:
# on an empty $PGDATA, initdb with POSTGRES_USER (the superuser) and
# POSTGRES_PASSWORD, password (SCRAM) logins from any host, POSTGRES_DB
# created, and the scripts of /docker-entrypoint-initdb.d run in order
# against it; then the server, as postgres.
set -eu
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pw=$(mktemp)
    printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is not set}" > "$pw"
    initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" -E UTF8 --locale=C.UTF-8 > /dev/null
    rm -f "$pw"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    echo 'host all all all scram-sha-256' >> "$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start > /dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
        psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -qc "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
        *.sh) echo "stand-in entrypoint: running $f"; . "$f" ;;
        *.sql) echo "stand-in entrypoint: running $f"; psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -f "$f" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop > /dev/null
    echo "stand-in entrypoint: database $POSTGRES_DB ready"
fi
exec "$@"
EOF
    chmod 755 "$dir/docker-entrypoint.sh"
    cat > "$dir/10_postgis.sh" <<'EOF'
# As the postgis image's own init script does: PostGIS in POSTGRES_DB.
psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -qc 'CREATE EXTENSION IF NOT EXISTS postgis'
EOF
    stamp=$( (cat "$dir/Dockerfile" "$dir/docker-entrypoint.sh" "$dir/10_postgis.sh"
        podman image inspect --format '{{.Id}}' "$slim_name") | sha256sum | cut -c1-16)
    have=$(podman image inspect --format '{{index .Labels "featurepipe.stand-in"}}' "$postgis_name" 2>/dev/null || true)
    if [ "$have" = "$stamp" ]; then
        say "stand-in $postgis_name: up to date"
        return 0
    fi
    say "podman build of the stand-in $postgis_name (Debian's postgresql-15, postgresql-15-postgis-3)"
    build "$run/build-postgis-stand-in.log" --label "featurepipe.stand-in=$stamp" -t "$postgis_name" "$dir"
}

# check_api BASE PSQL...: the requests every run of the image answers: GET
# /readyz, a POST of two points, a GET of each; then the table, by PSQL.
check_api() {
    local base=$1 code ids id1 id2 pair id name x y rows
    shift
    code=$(curl -sS -o "$run/post-answer.json" -w '%{http_code}' -X POST -H 'Content-Type: application/geo+json' \
        --data-binary "@$run/post.json" "$base/collections/places/items")
    [ "$code" = 201 ] || die "POST $base/collections/places/items answered $code: $(cat "$run/post-answer.json")"
    ids=$(python3 -c '
import json, sys
ids = json.load(open(sys.argv[1]))["ids"]
assert len(ids) == 2, ids
print(*ids)' "$run/post-answer.json") || die "the POST's answer has not two ids: $(cat "$run/post-answer.json")"
    say "ok: POST /collections/places/items (2 points): 201, ids $ids"
    read -r id1 id2 <<< "$ids"
    for pair in "$id1 Berlin 13.4 52.52" "$id2 Paris 2.35 48.86"; do
        read -r id name x y <<< "$pair"
        code=$(curl -sS -o "$run/get-$id.json" -w '%{http_code}' "$base/collections/places/items/$id")
        [ "$code" = 200 ] || die "GET $base/collections/places/items/$id answered $code: $(cat "$run/get-$id.json")"
        python3 -c '
import json, sys
f = json.load(open(sys.argv[1]))
assert str(f["id"]) == sys.argv[2], f["id"]
assert f["properties"]["name"] == sys.argv[3], f["properties"]
assert f["geometry"]["coordinates"] == [float(sys.argv[4]), float(sys.argv[5])], f["geometry"]' \
            "$run/get-$id.json" "$id" "$name" "$x" "$y" ||
            die "GET of feature $id is not what was POSTed: $(cat "$run/get-$id.json")"
        say "ok: GET /collections/places/items/$id: 200, $name at ($x, $y)"
    done
    rows=$("$@" -tAc "SELECT string_agg(name || ' ' || ST_AsText(geom), ', ' ORDER BY id) FROM places")
    [ "$rows" = "Berlin POINT(13.4 52.52), Paris POINT(2.35 48.86)" ] || die "the table holds '$rows', not Berlin and Paris"
    say "ok: the table places holds $rows"
}

# wait_ready BASE CONTAINER: GET BASE/readyz until 200 (2 minutes at most),
# while CONTAINER runs.
wait_ready() {
    local base=$1 c=$2 code=
    for _ in $(seq 1 240); do
        code=$(curl -s -o "$run/readyz.json" -w '%{http_code}' "$base/readyz" || true)
        [ "$code" = 200 ] && break
        if [ "$(podman inspect --format '{{.State.Running}}' "$c")" != true ]; then
            podman logs "$c" 2>&1 | tail -n 30 >&2
            die "the container $c stopped; its log is above"
        fi
        sleep 0.5
    done
    if [ "$code" != 200 ]; then
        podman logs "$c" 2>&1 | tail -n 30 >&2
        die "GET $base/readyz answered ${code:-nothing} after 2 minutes; $c's log is above"
    fi
    say "ok: GET /readyz: 200 $(cat "$run/readyz.json")"
}

# healthcheck CONTAINER: run the HEALTHCHECK of CONTAINER's image (or its
# compose service's) in it. Podman runs health checks on their interval with
# systemd timers; there is no systemd here (it says so in the logs), so the
# check is run by hand.
healthcheck() {
    local c=$1 out
    if ! podman healthcheck run "$c" > "$run/healthcheck-$c.out" 2>&1; then
        podman inspect --format '{{json .State.Health.Log}}' "$c" >&2 || true
        die "the health check of $c failed"
    fi
    out=$(podman inspect --format '{{.State.Health.Status}}{{range .State.Health.Log}}, exit {{.ExitCode}} {{.Output}}{{end}}' "$c" | tr '\n' ' ')
    say "ok: health check of $c (podman healthcheck run): ${out:0:160}"
}

t_standins=$(date +%s)
debootstrap_rootfs "$cache/debian-bookworm-slim"
debootstrap_rootfs "$cache/rust-1-bookworm" "$rust_packages"
add_toolchain "$cache/rust-1-bookworm"
base_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
import_standin "$cache/debian-bookworm-slim" "$slim_name" "ENV PATH=$base_path" 'CMD ["bash"]'
import_standin "$cache/rust-1-bookworm" "$rust_name" \
    "ENV PATH=/usr/local/cargo/bin:$base_path" "ENV RUSTUP_HOME=/usr/local/rustup" "ENV CARGO_HOME=/usr/local/cargo" \
    "ENV RUST_VERSION=$(cat "$cache/rust-1-bookworm/.featurepipe-rust-version")" 'CMD ["bash"]'
took="stand-ins $(elapsed "$t_standins")"
say "stand-in base images ready in $(elapsed "$t_standins")"

t_build=$(date +%s)
old_image=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
say "podman build of the Dockerfile as $image (the build stage compiles featurepipe: about 15 minutes on 2 cores; unchanged sources reuse the cached layers; log: $run/build.log)"
build "$run/build.log" -t "$image" -f "$run/context/Dockerfile" "$run/context"
new_image=$(podman image inspect --format '{{.Id}}' "$image")
if [ -n "$old_image" ] && [ "$old_image" != "$new_image" ]; then
    podman rmi "$old_image" >/dev/null 2>&1 || true
fi
took="$took, build $(elapsed "$t_build")"
say "built in $(elapsed "$t_build"): $image, $(podman image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}')"

health=$(podman image inspect --format '{{json .Config.Healthcheck.Test}}' "$image")
case "$health" in
*healthz*) say "the image's HEALTHCHECK: $health" ;;
*) die "the image has no HEALTHCHECK (was it built in the OCI format?): $health" ;;
esac
[ "$(podman image inspect --format '{{.Config.User}}' "$image")" = featurepipe ] || die "the image does not run as the user featurepipe"

t_run=$(date +%s)
throwaway_cluster fast
trap cleanup EXIT
pg_psql "$cluster_port" -d postgres -c "CREATE DATABASE featurepipe"
pg_psql "$cluster_port" -d featurepipe -f scripts/demo.sql
db_url=postgres://postgres@127.0.0.1:$cluster_port/featurepipe
listen_port=$(free_port)
say "PostGIS here: $db_url (data in $cluster_dir)"

cat > "$run/post.json" <<'JSON'
{"type":"FeatureCollection","features":[
  {"type":"Feature","geometry":{"type":"Point","coordinates":[13.4,52.52]},"properties":{"name":"Berlin","height_m":34}},
  {"type":"Feature","geometry":{"type":"Point","coordinates":[2.35,48.86]},"properties":{"name":"Paris","visited":true}}]}
JSON

# Host networking: the container reaches the cluster on 127.0.0.1, and
# listens on a free port of 127.0.0.1, not on 0.0.0.0:8080 (8080 may be
# taken here, and an open demo service is not put on the machine's
# interfaces). The HEALTHCHECK follows FEATUREPIPE_LISTEN, so it asks there.
podman run -d --name "$ctr" --cgroups=enabled --network host \
    -e DATABASE_URL="$db_url" -e FEATUREPIPE_LISTEN="127.0.0.1:$listen_port" -e FEATUREPIPE_AUTH=off \
    "$image" > /dev/null 2> "$run/podman-run.err" || { cat "$run/podman-run.err" >&2; die "podman run failed"; }
base=http://127.0.0.1:$listen_port
say "container $ctr: $image, --network host, FEATUREPIPE_LISTEN=127.0.0.1:$listen_port"
wait_ready "$base" "$ctr"
check_api "$base" pg_psql "$cluster_port" -d featurepipe
healthcheck "$ctr"
# The check asks the service, not merely anything: where nothing listens, it fails.
if podman exec -e FEATUREPIPE_LISTEN=127.0.0.1:1 "$ctr" sh -c "$(podman image inspect --format '{{index .Config.Healthcheck.Test 1}}' "$image")" > /dev/null 2>&1; then
    die "the HEALTHCHECK's command passes with FEATUREPIPE_LISTEN=127.0.0.1:1, where nothing listens"
fi
say "ok: the HEALTHCHECK's command fails with FEATUREPIPE_LISTEN=127.0.0.1:1, where nothing listens"
uid=$(podman exec "$ctr" id -u)
[ "$uid" = 10001 ] || die "the service runs as uid $uid, not 10001"
say "ok: the service runs as featurepipe (uid $uid), not root"
podman logs "$ctr" > "$run/container.log" 2>&1 || true
podman rm -f -t 5 "$ctr" > /dev/null 2>&1
took="$took, image's checks $(elapsed "$t_run")"
say "image checked in $(elapsed "$t_run")"

if [ -z "${FEATUREPIPE_IMAGE_NO_COMPOSE:-}" ]; then
    t_compose=$(date +%s)
    postgis_standin
    compose_port=$(free_port)
    # The compose file as written, but for its published port (a free one of
    # 127.0.0.1) and its relative paths (made absolute, into the snapshot).
    python3 - "$run/context" "$compose_port" > "$run/compose.yml" <<'PY'
import os, sys, yaml
root, port = sys.argv[1], sys.argv[2]
doc = yaml.safe_load(open(os.path.join(root, "docker-compose.yml")))
for name, svc in doc["services"].items():
    build = svc.get("build")
    if isinstance(build, str):
        svc["build"] = os.path.normpath(os.path.join(root, build))
    elif isinstance(build, dict):
        build["context"] = os.path.normpath(os.path.join(root, build.get("context", ".")))
    vols = []
    for v in svc.get("volumes", []):
        if isinstance(v, str) and v.startswith("."):
            v = os.path.normpath(os.path.join(root, v))
        vols.append(v)
    if vols:
        svc["volumes"] = vols
    ports = svc.get("ports")
    if ports:
        assert ports == ["8080:8080"], ports
        svc["ports"] = [f"127.0.0.1:{port}:8080"]
yaml.safe_dump(doc, sys.stdout, sort_keys=False)
PY
    compose=(podman-compose --no-ansi -p "$project" -f "$run/compose.yml"
        "--podman-build-args=--format docker --network host --pull=never" "--podman-run-args=--cgroups=enabled")
    say "podman-compose build (featurepipe from the cached layers above, deploy/pgbouncer; log: $run/compose-build.log)"
    if ! nice -n 10 "${compose[@]}" build > "$run/compose-build.log" 2>&1; then
        tail -n 30 "$run/compose-build.log" >&2
        die "podman-compose build failed (its log: $run/compose-build.log)"
    fi
    say "podman-compose up -d (log: $run/compose-up.log)"
    if ! "${compose[@]}" up -d > "$run/compose-up.log" 2>&1; then
        tail -n 30 "$run/compose-up.log" >&2
        die "podman-compose up failed (its log: $run/compose-up.log)"
    fi
    for svc in db pgbouncer featurepipe; do
        c=${project}_${svc}_1
        [ "$(podman inspect --format '{{.State.Running}}' "$c" 2>/dev/null)" = true ] ||
            { podman logs "$c" 2>&1 | tail -n 20 >&2; die "the compose service $svc is not running"; }
    done
    say "compose services running: db ($postgis_name, the stand-in), pgbouncer, featurepipe; featurepipe published on 127.0.0.1:$compose_port"
    base=http://127.0.0.1:$compose_port
    wait_ready "$base" "${project}_featurepipe_1"
    check_api "$base" podman exec "${project}_db_1" psql -X -U featurepipe -d featurepipe
    timeout=$(podman exec "${project}_db_1" psql -X -U featurepipe -d featurepipe -tAc \
        "SELECT array_to_string(setconfig, ',') FROM pg_db_role_setting JOIN pg_roles ON setrole = pg_roles.oid WHERE rolname = 'featurepipe'")
    [ "$timeout" = statement_timeout=60s ] || die "deploy/db-init.sql did not set the role's statement_timeout: '$timeout'"
    say "ok: the init scripts ran (places from scripts/demo.sql; deploy/db-init.sql: featurepipe's $timeout)"
    for svc in db pgbouncer featurepipe; do
        healthcheck "${project}_${svc}_1"
    done
    for svc in db pgbouncer featurepipe; do
        podman logs "${project}_${svc}_1" > "$run/compose-$svc.log" 2>&1 || true
    done
    "${compose[@]}" down -v > "$run/compose-down.log" 2>&1 || true
    remove_containers
    podman rmi "${project}_featurepipe" "${project}_pgbouncer" > /dev/null 2>&1 || true
    took="$took, compose $(elapsed "$t_compose")"
    say "compose checked in $(elapsed "$t_compose")"
fi

ok=1
say "passed in $(elapsed "$t0") ($took)"
