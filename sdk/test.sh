#!/usr/bin/env bash
# Runs the SDK suites: `sdk/test.sh python`, `sdk/test.sh ts`, or `sdk/test.sh` for both (both
# run; the status is non-zero when either fails). Each suite starts its own real `lbb serve`
# ($LBB_BIN, default bin/lbb) on a free port and stops it by its pid; not root, the server
# tests skip and say so.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export LBB_BIN=${LBB_BIN:-$root/bin/lbb}
python=${SDK_PYTHON:-/usr/bin/python3}

python_suite() {
	# Debian's python3 with its httpx, setuptools and pytest: the SDK goes into a throwaway venv
	# that sees the system packages, installed the way a user installs it (pip with the system's
	# setuptools, offline, nothing to download). setuptools builds in place; what it leaves
	# (build/, *.egg-info) goes before and after, so no stale file reaches the wheel.
	local venv rc
	venv=$(mktemp -d /tmp/lbb-sdk-venv.XXXXXX) || return 1
	rm -rf sdk/python/build sdk/python/src/*.egg-info
	"$python" -m venv --system-site-packages "$venv" &&
		"$venv/bin/pip" install --quiet --no-deps --no-index --no-build-isolation --disable-pip-version-check ./sdk/python &&
		(cd sdk/python && "$venv/bin/python" -m pytest -q tests)
	rc=$?
	rm -rf "$venv" sdk/python/build sdk/python/src/*.egg-info
	return $rc
}

ts_suite() {
	(cd sdk/typescript && npm ci --no-audit --no-fund --silent && rm -rf dist && npx tsc -p tsconfig.json && node dist/test/harness.js)
}

case "${1:-all}" in
python) python_suite ;;
ts) ts_suite ;;
all)
	rc=0
	echo "== Python SDK"
	python_suite || rc=1
	echo "== TypeScript SDK"
	ts_suite || rc=1
	exit $rc
	;;
*)
	echo "usage: sdk/test.sh [python|ts|all]" >&2
	exit 2
	;;
esac
