#!/usr/bin/env bash
# Installs the pinned SeaweedFS `weed`, the S3-compatible server the object-storage tests run
# on loopback (weed server -s3): $LBB_WEED_DIR/weed (default /usr/local/lib/lbb/weed), a static
# Go binary built from the Go module proxy (a few minutes cold). Idempotent and fast when the
# pinned version is there. A tool, not a dependency of lbb: go.mod does not mention it.
#
# It is built in a wrapper module of its own: SeaweedFS requires github.com/tyler-smith/go-bip39,
# which the proxy no longer serves; github.com/cosmos/go-bip39 is the same code, replaced in.
set -euo pipefail
WEED_VERSION=v0.0.0-20261109003541-7506e5f91cd6
dir=${LBB_WEED_DIR:-/usr/local/lib/lbb}
bin=$dir/weed
GO=${GO:-go}

have_version() {
	[ -x "$bin" ] || return 1
	"$GO" version -m "$bin" 2>/dev/null | awk '$1 == "dep" && $2 == "github.com/seaweedfs/seaweedfs" {print $3} $1 == "mod" && $2 == "github.com/seaweedfs/seaweedfs" {print $3}' | grep -qx "$WEED_VERSION"
}

if have_version; then
	exit 0
fi
if ! command -v "$GO" >/dev/null 2>&1; then
	echo "install-seaweedfs: go not found (needed to build weed $WEED_VERSION)" >&2
	exit 1
fi
mkdir -p "$dir"
echo "install-seaweedfs: building github.com/seaweedfs/seaweedfs/weed@$WEED_VERSION into $dir (a few minutes the first time)"
# Build in a temporary directory: a half-written binary must never look installed.
tmp=$(mktemp -d "$dir/.weed-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cat >go.mod <<MOD
module lbb.local/weed

go 1.25

replace github.com/tyler-smith/go-bip39 => github.com/cosmos/go-bip39 v1.0.0
MOD
GOFLAGS=-mod=mod "$GO" get "github.com/seaweedfs/seaweedfs@$WEED_VERSION"
CGO_ENABLED=0 GOFLAGS="-mod=mod -trimpath" "$GO" build -o "$tmp/weed" github.com/seaweedfs/seaweedfs/weed
chmod 0755 "$tmp/weed"
mv -f "$tmp/weed" "$bin"
if ! have_version; then
	echo "install-seaweedfs: $bin does not report $WEED_VERSION after the build" >&2
	exit 1
fi
echo "install-seaweedfs: $bin ($WEED_VERSION)"
