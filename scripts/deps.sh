#!/usr/bin/env bash
# Installs the host packages lbb's builds and tests need. Idempotent and quiet when all is there.
set -euo pipefail
need=()
for pair in debootstrap:debootstrap npm:npm bwrap:bubblewrap mkfs.ext4:e2fsprogs losetup:mount ip:iproute2 zstd:zstd; do
	cmd=${pair%%:*} pkg=${pair#*:}
	command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing ${need[*]}; run as root (or: sudo apt-get install ${need[*]})" >&2
		exit 1
	fi
	echo "deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
fi
