#!/usr/bin/env bash
# Install Debian packages a make target needs: apt-install.sh WHO PACKAGE...
# Only root with apt-get can; anyone else is told what to install. WHO prefixes the messages.
set -euo pipefail
who="$1"; shift
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "$who: needs Debian's $*, and only root on Debian/Ubuntu can install it here." >&2
    echo "$who: install it (Debian/Ubuntu: apt-get install $*), then rerun make." >&2
    exit 1
fi
echo "$who: installing $* from Debian's packages" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have empty package lists.
apt-get update -qq >/dev/null
apt-get install -y -qq "$@" >/dev/null
