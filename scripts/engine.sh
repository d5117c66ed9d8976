#!/usr/bin/env bash
# Make sure a Docker engine answers; start one (Debian's docker.io) when none does.
#
# 1. An engine already answering at DOCKER_HOST or the default socket is used as it is.
# 2. Otherwise, as root on Debian/Ubuntu: install docker.io and runsc, start dockerd in the
#    background with no host networking side effects, register gVisor as runtime "runsc",
#    wait until it answers and print where it listens.
# 3. Anywhere else: exit 1 with a message that says how to get Docker.
# Idempotent: a second run finds the engine answering and does nothing. It never stops,
# reconfigures or restarts an engine it did not start.
set -euo pipefail

STATE_DIR=${SANDBOX_ENGINE_DIR:-/var/lib/sandbox-engine}
SOCK=/var/run/docker.sock
LOG="$STATE_DIR/dockerd.log"

say() { printf 'engine: %s\n' "$*" >&2; }

answers() {
    if [ -n "${DOCKER_HOST:-}" ]; then
        timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
    else
        [ -S "$SOCK" ] && timeout 10 docker -H "unix://$SOCK" version --format '{{.Server.Version}}' >/dev/null 2>&1
    fi
}

where() { if [ -n "${DOCKER_HOST:-}" ]; then echo "$DOCKER_HOST"; else echo "unix://$SOCK"; fi; }

if command -v docker >/dev/null 2>&1 && answers; then
    say "a Docker engine answers at $(where); using it"
    exit 0
fi

if [ -n "${DOCKER_HOST:-}" ]; then
    say "DOCKER_HOST=$DOCKER_HOST is set but no engine answers there."
    say "Start that engine, or unset DOCKER_HOST to let this script start a local one."
    exit 1
fi

if [ "$(uname -s)" != "Linux" ] || [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    say "no Docker engine answers at unix://$SOCK, and this script can only start one as root on Debian/Ubuntu."
    say "Install Docker (https://docs.docker.com/engine/install/, or Docker Desktop on macOS),"
    say "start it, and set DOCKER_HOST if it does not listen on $SOCK."
    exit 1
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v runsc >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    say "installing docker.io and runsc from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq docker.io runsc >/dev/null
fi

mkdir -p "$STATE_DIR"
if [ -f "$STATE_DIR/dockerd.pid" ] && kill -0 "$(cat "$STATE_DIR/dockerd.pid")" 2>/dev/null; then
    say "dockerd we started (pid $(cat "$STATE_DIR/dockerd.pid")) is running but not answering yet; waiting"
else
    # A socket left behind by a dead engine would make dockerd refuse to start.
    if [ -S "$SOCK" ] && ! answers; then rm -f "$SOCK"; fi
    # containerd is started by dockerd itself when none runs.
    cat > "$STATE_DIR/daemon.json" <<JSON
{
  "runtimes": {"runsc": {"path": "$(command -v runsc)", "runtimeArgs": ["--network=none"]}}
}
JSON
    say "starting dockerd (log: $LOG)"
    nohup dockerd \
        --config-file "$STATE_DIR/daemon.json" \
        --iptables=false --ip-masq=false --ip-forward=false --bridge=none \
        --host "unix://$SOCK" \
        --pidfile "$STATE_DIR/dockerd.pid" \
        >"$LOG" 2>&1 </dev/null &
    disown || true
fi

for _ in $(seq 1 120); do
    if answers; then
        say "dockerd answers at unix://$SOCK (runtimes: $(docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>/dev/null))"
        exit 0
    fi
    sleep 0.5
done
say "dockerd did not answer within 60 s; last lines of $LOG:"
tail -20 "$LOG" >&2 || true
exit 1
