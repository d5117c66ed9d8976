#!/usr/bin/env bash
# Make sure a Docker engine answers; start one (Debian's docker.io) when none does.
#
# 1. An engine already answering at DOCKER_HOST or the default socket is used as it is.
# 2. Otherwise, as root on Debian/Ubuntu: install docker.io and runsc. If an engine we did not
#    start answers after that (on a systemd host the package starts docker.service), it is used
#    as it is. Else start dockerd in the background with no host networking side effects,
#    register gVisor as runtime "runsc", wait until it answers and print where it listens.
# 3. Anywhere else: exit 1 with a message that says how to get Docker.
# Idempotent: a second run finds the engine answering and does nothing. It never stops,
# reconfigures or restarts an engine it did not start.
#
# `engine.sh stop` stops the dockerd this script started (the live dockerd its pidfile names)
# and nothing else: an engine systemd or a person started is left running, and said so.
set -euo pipefail

STATE_DIR=${SANDBOX_ENGINE_DIR:-/var/lib/sandbox-engine}
SOCK=/var/run/docker.sock
LOG="$STATE_DIR/dockerd.log"
PIDFILE="$STATE_DIR/dockerd.pid"

say() { printf 'engine: %s\n' "$*" >&2; }

answers() {
    if [ -n "${DOCKER_HOST:-}" ]; then
        timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
    else
        [ -S "$SOCK" ] && timeout 10 docker -H "unix://$SOCK" version --format '{{.Server.Version}}' >/dev/null 2>&1
    fi
}

where() { if [ -n "${DOCKER_HOST:-}" ]; then echo "$DOCKER_HOST"; else echo "unix://$SOCK"; fi; }

# Wait up to $1 seconds for an engine to answer.
wait_answers() {
    local end=$((SECONDS + $1))
    until answers; do
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.5
    done
}

runtimes() { docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>/dev/null || true; }

# The dockerd this script started (its pidfile names a live dockerd).
ours_running() {
    local pid
    [ -f "$PIDFILE" ] && pid=$(cat "$PIDFILE" 2>/dev/null) && [ -n "$pid" ] &&
        kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]
}

# The systemd unit running (or about to start) the distribution's own engine, if any.
system_unit() {
    [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1 || return 1
    local unit state
    for unit in docker.service docker.socket; do
        state=$(systemctl is-active "$unit" 2>/dev/null) || true
        case "$state" in active | activating | reloading) echo "$unit"; return 0 ;; esac
    done
    return 1
}

use_theirs() {
    say "a Docker engine this script did not start ($1) answers at unix://$SOCK; using it as it is"
    case " $(runtimes)" in
        *" runsc "*) ;;
        *) say "note: that engine has no runtime \"runsc\" registered (gVisor sandboxes will fail)" ;;
    esac
    exit 0
}

stop_ours() {
    if ! ours_running; then
        if answers; then
            say "the engine at $(where) was not started by this script; leaving it running"
        else
            say "no engine started by this script is running; nothing to stop"
        fi
        return 0
    fi
    local pid
    pid=$(cat "$PIDFILE")
    say "stopping dockerd (pid $pid), which this script started; sandboxes on it stop too"
    kill -TERM "$pid"
    local end=$((SECONDS + 60))
    # (A zombie has stopped: only its parent can reap it.)
    while kill -0 "$pid" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; do
        if [ "$SECONDS" -ge "$end" ]; then
            say "dockerd (pid $pid) did not stop within 60 s; see $LOG"
            return 1
        fi
        sleep 0.5
    done
    rm -f "$PIDFILE"
    say "stopped; 'make engine' (or scripts/engine.sh) starts it again"
}

case "${1:-}" in
    "") ;;
    stop) stop_ours; exit $? ;;
    *) say "usage: engine.sh [stop]"; exit 2 ;;
esac

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

# Installing docker.io on a systemd host enables and starts the distribution's dockerd
# (docker.service, or docker.socket on the first connection). That engine is not ours: use it
# as it is, never start a second dockerd next to it, never reconfigure or stop it.
if ! ours_running; then
    if unit=$(system_unit); then
        say "$unit (not started by this script) is active; waiting for its engine to answer"
        if wait_answers 60; then use_theirs "$unit"; fi
        say "$unit is active but no engine answers at unix://$SOCK within 60 s;"
        say "see 'systemctl status docker.service' and 'journalctl -u docker.service'."
        say "This script does not start a second engine next to it: fix or stop that one, then rerun."
        exit 1
    fi
    if answers; then use_theirs "found after the install"; fi
fi

mkdir -p "$STATE_DIR"
if ours_running; then
    say "dockerd we started (pid $(cat "$PIDFILE")) is running but not answering yet; waiting"
else
    # A socket or pidfile left behind by a dead engine would make dockerd refuse to start.
    if [ -S "$SOCK" ] && ! answers; then rm -f "$SOCK"; fi
    rm -f "$PIDFILE"
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
        --pidfile "$PIDFILE" \
        >"$LOG" 2>&1 </dev/null &
    disown || true
fi

if wait_answers 60; then
    say "dockerd answers at unix://$SOCK (runtimes: $(runtimes))"
    exit 0
fi
say "dockerd did not answer within 60 s; last lines of $LOG:"
tail -20 "$LOG" >&2 || true
exit 1
