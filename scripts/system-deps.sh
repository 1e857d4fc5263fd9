#!/usr/bin/env bash
# Installs the Debian packages the project needs when their command is missing.
# Usage: scripts/system-deps.sh COMMAND:PACKAGE [COMMAND:PACKAGE ...]
# As root it runs apt-get; otherwise it prints the exact command to run and fails.
set -euo pipefail
missing=()
for pair in "$@"; do
    cmd=${pair%%:*}
    pkg=${pair#*:}
    if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "$cmd" ]; then
        missing+=("$pkg")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
else
    echo "autograd-lab needs these Debian packages: ${missing[*]}" >&2
    echo "run:  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
