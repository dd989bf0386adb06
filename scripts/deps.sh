#!/usr/bin/env bash
# Installs the host packages lbb's builds and tests need. Idempotent and quiet when all is there.
set -euo pipefail
need=()
# Installed without what Debian recommends beside them: QEMU and Chromium.
qemu=()
for pair in debootstrap:debootstrap npm:npm bwrap:bubblewrap mkfs.ext4:e2fsprogs losetup:mount ip:iproute2 zstd:zstd; do
	cmd=${pair%%:*} pkg=${pair#*:}
	command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || need+=("$pkg")
done
# The Python SDK and its tests, on Debian's python3 (PyPI is out of reach): httpx, pytest,
# pytest-timeout, venv (ensurepip) for installing the SDK the way users do, and setuptools and
# wheel, its build backend. jupyter_client (with ipykernel): the API's contract test runs code
# contexts on the local driver, on the host's python3.
for pair in jupyter_client:python3-ipykernel httpx:python3-httpx setuptools:python3-setuptools wheel:python3-wheel pytest:python3-pytest pytest_timeout:python3-pytest-timeout ensurepip:python3-venv; do
	mod=${pair%%:*} pkg=${pair#*:}
	/usr/bin/python3 -c "import $mod" >/dev/null 2>&1 || need+=("$pkg")
done
# The terminal and preview tests: tmux (a real terminal for lbb sandbox shell), and headless
# Chromium, the browser that opens previews (without what Debian recommends beside it).
command -v tmux >/dev/null 2>&1 || need+=(tmux)
# PostgreSQL's server programs (initdb, pg_ctl): the PostgreSQL store's tests start a throwaway
# cluster of their own (internal/store/postgres/pgtest). Debian keeps them off PATH.
pg=()
command -v pg_ctl >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || pg+=(postgresql)
command -v chromium >/dev/null 2>&1 || qemu+=(chromium)
# The microvm driver's QEMU, without what Debian recommends beside it (a GUI, firmware for
# other machines): microvm boots with SeaBIOS's bios-microvm.bin, which it depends on.
command -v qemu-system-x86_64 >/dev/null 2>&1 || qemu+=(qemu-system-x86)
if [ ${#need[@]} -gt 0 ] || [ ${#qemu[@]} -gt 0 ] || [ ${#pg[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing ${need[*]} ${qemu[*]} ${pg[*]}; run as root (or: sudo apt-get install ${need[*]} ${qemu[*]} ${pg[*]})" >&2
		exit 1
	fi
	echo "deps: installing ${need[*]} ${qemu[*]} ${pg[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	if [ ${#need[@]} -gt 0 ]; then
		apt-get install -y -qq "${need[@]}" >/dev/null
	fi
	if [ ${#qemu[@]} -gt 0 ]; then
		apt-get install -y -qq --no-install-recommends "${qemu[@]}" >/dev/null
	fi
	if [ ${#pg[@]} -gt 0 ]; then
		# The programs only: postgresql-common makes no cluster of the system's (so no server
		# runs), and keeps this file of ours over its own (confold).
		mkdir -p /etc/postgresql-common
		[ -e /etc/postgresql-common/createcluster.conf ] || echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf
		apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confold "${pg[@]}" >/dev/null
	fi
fi
