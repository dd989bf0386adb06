#!/usr/bin/env bash
# Installs the pinned gVisor runsc that the gvisor runtime driver runs, as a static Go tool
# binary: $LBB_RUNSC_DIR/runsc (default /usr/local/lib/lbb/runsc). Idempotent and fast when the
# pinned version is already there (it reads the binary's embedded module version, runs nothing).
#
# runsc MUST be static (CGO_ENABLED=0): a dynamically linked runsc fails at start with
# "error executing umounter: fork/exec /proc/self/exe: no such file or directory".
# It is built from the Go module proxy (about 4 min cold, about 1 min from the module cache);
# it is a tool, not a module dependency of lbb: go.mod does not mention it.
#
# Keep RUNSC_VERSION in step with runsc.Version in internal/runtime/gvisor/requirements.go.
set -euo pipefail
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
dir=${LBB_RUNSC_DIR:-/usr/local/lib/lbb}
bin=$dir/runsc
GO=${GO:-go}

have_version() {
	[ -x "$bin" ] || return 1
	"$GO" version -m "$bin" 2>/dev/null | awk '$1 == "mod" && $2 == "gvisor.dev/gvisor" {print $3}' | grep -qx "$RUNSC_VERSION" || return 1
	# Static: no program interpreter.
	! LC_ALL=C od -An -c -N 4096 "$bin" | tr -d ' \n' | grep -q 'ld-linux'
}

if have_version; then
	exit 0
fi
if ! command -v "$GO" >/dev/null 2>&1; then
	echo "install-runsc: go not found (needed to build runsc $RUNSC_VERSION)" >&2
	exit 1
fi
mkdir -p "$dir"
echo "install-runsc: building gvisor.dev/gvisor/runsc@$RUNSC_VERSION into $dir (a few minutes the first time)"
# Build into a temporary directory first: a half-written binary must never look installed.
tmp=$(mktemp -d "$dir/.runsc-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-trimpath "$GO" install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
chmod 0755 "$tmp/runsc"
mv -f "$tmp/runsc" "$bin"
if ! have_version; then
	echo "install-runsc: $bin does not report $RUNSC_VERSION after the build" >&2
	exit 1
fi
echo "install-runsc: $bin ($RUNSC_VERSION)"
