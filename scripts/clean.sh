#!/usr/bin/env bash
# Remove every container, network and volume the SDK created (label io.sandbox.managed-by).
# Never touches anything without that label. Does nothing when no engine answers.
set -uo pipefail
label=io.sandbox.managed-by=sandbox-sdk
docker version >/dev/null 2>&1 || { echo "clean: no engine answers; nothing to remove" >&2; exit 0; }
ids=$(docker ps -aq --filter "label=$label")
[ -n "$ids" ] && docker rm -f $ids >/dev/null
nets=$(docker network ls -q --filter "label=$label")
[ -n "$nets" ] && docker network rm $nets >/dev/null
vols=$(docker volume ls -q --filter "label=$label")
[ -n "$vols" ] && docker volume rm -f $vols >/dev/null
echo "clean: removed $(echo $ids | wc -w) containers, $(echo $nets | wc -w) networks, $(echo $vols | wc -w) volumes" >&2
exit 0
