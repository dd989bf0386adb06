#!/usr/bin/env bash
# Installs the host packages lbb's builds and tests need. Idempotent and quiet when all is there.
set -euo pipefail
need=()
for pair in debootstrap:debootstrap npm:npm bwrap:bubblewrap mkfs.ext4:e2fsprogs losetup:mount ip:iproute2 zstd:zstd; do
	cmd=${pair%%:*} pkg=${pair#*:}
	command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || need+=("$pkg")
done
# The Python SDK and its tests, on Debian's python3 (PyPI is out of reach): httpx, pytest,
# pytest-timeout, venv (ensurepip) for installing the SDK the way users do, and setuptools and
# wheel, its build backend.
for pair in httpx:python3-httpx setuptools:python3-setuptools wheel:python3-wheel pytest:python3-pytest pytest_timeout:python3-pytest-timeout ensurepip:python3-venv; do
	mod=${pair%%:*} pkg=${pair#*:}
	/usr/bin/python3 -c "import $mod" >/dev/null 2>&1 || need+=("$pkg")
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
