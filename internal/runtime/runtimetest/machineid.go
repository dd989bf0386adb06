package runtimetest

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/runtime"
)

// machineID: every sandbox has a machine id of its own (the image's /etc/machine-id is
// empty; the agent writes a random one at boot, through the driver's per-sandbox file), and
// keeps it across a stop and a start: the same disk is the same machine.
func (e *env) machineID(t *testing.T) {
	read := func(b *box) string {
		t.Helper()
		id := strings.TrimSpace(b.ok("cat /etc/machine-id"))
		if _, err := hex.DecodeString(id); err != nil || len(id) != 32 {
			t.Fatalf("/etc/machine-id is %q, want 32 hex digits", id)
		}
		return id
	}
	a, b := e.boot(t, runtime.Limits{}), e.boot(t, runtime.Limits{})
	ida, idb := read(a), read(b)
	if ida == idb {
		t.Errorf("two sandboxes share machine id %s", ida)
	}
	// The rest of /etc stays the image's, read-only.
	if r := a.sh("echo x > /etc/hostname.lbb-test || exit 1; rm -f /etc/hostname.lbb-test"); r.exit.ExitCode == 0 {
		t.Errorf("created a file in /etc: %v", r)
	}
	ctx := timeout(t, time.Minute)
	if err := e.d.Stop(ctx, a.id); err != nil {
		t.Fatal(err)
	}
	a2 := e.start(t, a.id)
	if got := read(a2); got != ida {
		t.Errorf("machine id after a stop and a start: %s, was %s", got, ida)
	}
}
