//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
)

// TestHostileContexts runs the hostile suite's Python programs (runtimetest) as cells of a
// code context, on ns and on gvisor, with the same checks as the suite's commands: a cell is
// user code in a kernel that lives on, and must be no less contained. After the cells that
// go for the agent (signals, kill, an i386 system call that ns answers with SIGSYS), the
// sandbox still answers a command and the context a cell.
func TestHostileContexts(t *testing.T) {
	s := startServer(t, "--pool-min", "0", "--pool-max", "1")
	port := runtimetest.HostSecret(t)
	abstract := fmt.Sprintf("lbb-hostile-ctx-%d", time.Now().UnixNano())
	uln, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer uln.Close()
	// Fewer processes than the hostile suite's 64 (the kernel, its threads, the driver and
	// the agent take ~40 under gVisor, whose pids count threads), and more memory than the
	// default: gVisor copies a forked process's written memory in 2 MiB units, and each
	// child of a kernel (~100 MB resident) costs the sandbox ~30-40 MB. At 512 MiB a dozen
	// children fill it, the memory guard cannot reach the Sentry and the sandbox ends (the
	// host is unharmed, but the fork never fails with EAGAIN as the check wants).
	const pids, memory = 48, 2048
	programs := []runtimetest.HostileProgram{
		runtimetest.ForkCount(pids),
		runtimetest.Network(port, abstract),
		runtimetest.Syscalls(),
		runtimetest.ProcSelfExe(),
		runtimetest.SocketFamilies(),
		runtimetest.AgentOutOfReach(),
		runtimetest.SignalsToInit(),
		{Name: "i386 system call", Code: runtimetest.Int80Py, Check: func(out string) error {
			// ns kills the kernel (nothing printed); gVisor answers ENOSYS.
			if strings.Contains(out, "int80 returned") && !strings.Contains(out, "int80 returned -38\n") {
				return fmt.Errorf("an i386 system call ran: %q", out)
			}
			return nil
		}},
	}
	n := 0
	for _, iso := range isolations(t) {
		t.Run(iso, func(t *testing.T) {
			r := s.call("POST", "/v1/sandboxes?graph=main", "", map[string]string{"Idempotency-Key": "hostile-ctx-" + iso},
				fmt.Sprintf(`{"expires_in_seconds": 600, "isolation": %q, "limits": {"pids": %d, "memory_mib": %d}}`, iso, pids, memory))
			if r.status != 201 {
				t.Fatalf("create: %d %s", r.status, r.body)
			}
			sb := r.obj(t)["id"].(string)
			defer s.call("DELETE", "/v1/sandboxes/"+sb+"?graph=main", "", nil, "")
			r = s.call("POST", "/v1/sandboxes/"+sb+"/contexts?graph=main", "", nil, `{"language": "python"}`)
			if r.status != 201 && r.status != 200 {
				t.Fatalf("context: %d %s", r.status, r.body)
			}
			cid := r.obj(t)["id"].(string)
			cell := func(code string) map[string]any {
				t.Helper()
				n++
				b, _ := json.Marshal(map[string]any{"code": code, "context": cid, "timeout_ms": 60000})
				r := s.call("POST", "/v1/sandboxes/"+sb+"/code?graph=main", "", map[string]string{"Idempotency-Key": fmt.Sprintf("hostile-cell-%s-%d", iso, n)}, string(b))
				if r.status != 200 {
					t.Fatalf("cell: %d %s", r.status, r.body)
				}
				return r.obj(t)
			}
			for _, p := range programs {
				t0 := time.Now()
				got := cell(p.Code)
				out, _ := got["stdout"].(string)
				if err := p.Check(out); err != nil {
					t.Errorf("%s: %v\n(cell %v: %v)", p.Name, err, got["status"], got["error"])
				}
				t.Logf("%s: %s: cell %v in %s: %.80q", iso, p.Name, got["status"], time.Since(t0).Round(time.Millisecond), out)
				// The agent and the sandbox live on, and so does the context.
				// A program that signals every process it can (signals to init) may outlive its
				// cell for a moment when it killed the context's driver, and a command started
				// then is its fair target (one sandbox): such a command is tried again after the
				// program's own 0.5 s, up to three times. The agent must answer every time.
				var r reply
				for try := 0; ; try++ {
					r = s.call("POST", "/v1/sandboxes/"+sb+"/commands?graph=main", "", map[string]string{"Idempotency-Key": fmt.Sprintf("hostile-cmd-%s-%d-%d", iso, n, try)},
						`{"argv": ["echo", "alive"], "wait_ms": 30000}`)
					if try < 3 && r.status == 200 && strings.Contains(string(r.body), `"signal":"SIG`) {
						time.Sleep(time.Second)
						continue
					}
					break
				}
				if r.status != 200 || !strings.Contains(string(r.body), `alive\n`) {
					t.Fatalf("after %s, a command: %d %s", p.Name, r.status, r.body)
				}
				if got := cell("'alive'"); got["status"] != "succeeded" {
					t.Fatalf("after %s, the context: %v", p.Name, got)
				}
			}
		})
	}
}
