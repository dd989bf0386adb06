//go:build linux

package ns_test

import (
	"strings"
	"testing"

	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/ns"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// maskScript checks, inside a sandbox, the parts of /proc and /sys its init hides: each file
// that exists is covered by a mount and reads empty; each directory is covered by an empty,
// read-only, nosuid, nodev, noexec mount nothing can be made in; each of the read-only trees
// is covered by a read-only mount. It prints what is wrong, then "checked N".
const maskScript = `
top() { awk -v p="$1" '$5==p{o=$6} END{print o}' /proc/self/mountinfo; }
n=0
for p in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug /proc/latency_stats /proc/timer_stats /proc/kallsyms /proc/kmsg; do
  [ -e "$p" ] || continue; n=$((n+1))
  [ -n "$(top $p)" ] || echo "unmasked $p"
  [ "$(timeout 5 head -c 1 $p 2>/dev/null | wc -c)" = 0 ] || echo "content $p"
done
for p in /proc/acpi /proc/scsi /proc/asound /sys/firmware /sys/devices/virtual/powercap; do
  [ -d "$p" ] || continue; n=$((n+1))
  o=",$(top $p),"
  for f in ro nosuid nodev noexec; do case "$o" in *",$f,"*) ;; *) echo "$p not $f: $o";; esac; done
  [ -z "$(ls -A $p)" ] || echo "not empty $p"
  mkdir "$p/x" 2>/dev/null && echo "writable $p"
done
for p in /proc/sys /proc/sysrq-trigger /proc/irq /proc/bus /proc/fs; do
  [ -e "$p" ] || continue; n=$((n+1))
  case ",$(top $p)," in *,ro,*) ;; *) echo "$p not read-only: $(top $p)";; esac
done
echo "checked $n"
`

// TestProcMasked: the init's masks of /proc and /sys hold (they are hardening no other test
// looks at; the directories share one empty tmpfs).
func TestProcMasked(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real sandbox; skipped in -short mode")
	}
	testkit.RequiresRoot(t)
	testkit.RequiresUserNS(t)
	img := runtimetest.FindImage(t)
	d := ns.New(ns.Config{StateDir: runtimetest.StateDir(t), AgentPath: testkit.Agent(t), CgroupParent: "lbb-test", Logger: runtimetest.Logger()})
	if err := runtime.CheckRequirements(d); err != nil {
		testkit.SkipPrivileged(t, "%v", err)
	}
	out := runtimetest.RunSh(t, d, runtime.Spec{ID: "sbx_procmask", Image: img}, maskScript)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; len(lines) != 1 || last == "checked 0" {
		t.Errorf("masks:\n%s", out)
	}
	t.Log(lines[len(lines)-1])
}
