#!/usr/bin/env bash
# The Docker engine the container test (crates/cordon/tests/container.rs) runs in, and the
# image it runs: Debian's docker.io, no image from any registry.
#
#   scripts/container-engine.sh start    start dockerd unless one answers; prints "started" or "running"
#   scripts/container-engine.sh stop     stop the dockerd `start` started (none other)
#   scripts/container-engine.sh image CORDON_BINARY TAG
#                                        TAG := the Debian root of scripts/debian-root.sh, imported,
#                                        plus CORDON_BINARY at /usr/local/bin/cordon and a user `tester`
#   scripts/container-engine.sh podman-image CORDON_BINARY TAG   the same image, in Podman's store
#
# Debian's client (/usr/bin/docker, 20.10) is used by path: another client earlier on PATH may
# speak a newer API than this engine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
docker=/usr/bin/docker
pidfile=/run/cordon-test-dockerd.pid
# Made by `start` when it started the engine, so `stop` stops no other.
started=/run/cordon-test-dockerd.started
case "${1:-}" in
start)
    if "$docker" info >/dev/null 2>&1; then
        echo running
        exit 0
    fi
    command -v dockerd >/dev/null || { echo "$0: no dockerd (apt-get install docker.io)" >&2; exit 1; }
    # A pidfile left by an engine that was killed would stop this one from starting.
    if [ -s "$pidfile" ] && [ "$(cat "/proc/$(cat "$pidfile")/comm" 2>/dev/null)" != dockerd ]; then
        rm -f "$pidfile"
    fi
    # overlay2 on ext4/xfs; the data stays under /var/lib/docker (prune what the test made).
    nohup dockerd --data-root /var/lib/docker --exec-root /run/cordon-test-docker \
        --pidfile "$pidfile" -H unix:///run/docker.sock >/tmp/cordon-test-dockerd.log 2>&1 &
    for _ in $(seq 60); do
        if "$docker" info >/dev/null 2>&1; then
            : >"$started"
            echo started
            exit 0
        fi
        sleep 0.5
    done
    echo "$0: dockerd did not answer in 30 s; its log:" >&2
    tail -20 /tmp/cordon-test-dockerd.log >&2
    exit 1
    ;;
stop)
    # Only the dockerd `start` started (its marker), and only while that pid is a dockerd: a
    # pidfile left by a killed engine may name another process by now.
    if [ -e "$started" ] && [ -s "$pidfile" ]; then
        pid=$(cat "$pidfile")
        if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        fi
    fi
    rm -f "$started"
    ;;
image | podman-image)
    bin=$2
    tag=$3
    if [ "$1" = podman-image ]; then
        # This machine's workarounds to start any container (see podman_args in the test).
        docker="podman --cgroup-manager=cgroupfs --runtime=runc"
        build_opts="--ulimit nofile=1024:1024 --ulimit nproc=1024:1024"
    fi
    root_tar="$here/../target/container/root.tar"
    bash "$here/debian-root.sh" "$root_tar" ca-certificates curl git procps
    base="cordon-test-base:$(stat -c %Y "$root_tar")"
    if ! $docker image inspect "$base" >/dev/null 2>&1; then
        $docker import "$root_tar" "$base" >/dev/null
    fi
    ctx=$(mktemp -d)
    trap 'rm -rf "$ctx"' EXIT
    cp "$bin" "$ctx/cordon"
    # Podman names an imported image localhost/…; a short name could be looked up in registries.
    from=$base
    [ "$1" = podman-image ] && from="localhost/$base"
    printf 'FROM %s\nCOPY cordon /usr/local/bin/cordon\nRUN useradd --create-home --shell /bin/sh tester\n' \
        "$from" >"$ctx/Dockerfile"
    # shellcheck disable=SC2086
    $docker build ${build_opts:-} -q -t "$tag" "$ctx" >/dev/null
    ;;
*)
    echo "usage: $0 start|stop|image|podman-image CORDON_BINARY TAG" >&2
    exit 2
    ;;
esac
