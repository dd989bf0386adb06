//go:build linux

package e2e

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// burnCode burns CPU in a loop until the process has used input seconds of it (or forever
// for a negative input), and answers how much it used.
const burnCode = `import time
def run(input, config):
    while input < 0 or time.process_time() < input:
        pass
    return time.process_time()`

// TestMetering, on a real `lbb serve` and each driver here: a run that burns 1 s of CPU at
// cpus 1 is metered at 1000 vcpu_ms within 15%; a command holding a 512 MiB sandbox for 2 s
// at 1000 gib_ms within 15%; a CPU-bound run and a CPU-bound command whose budgets run out
// are stopped (status budget_exceeded) within a bounded overshoot, and the next call is
// refused 402 budget_exceeded before anything runs; GET /v1/usage sums the records.
func TestMetering(t *testing.T) {
	s := startServer(t, "--pool-min", "1", "--pool-max", "2")
	drivers := []string{"ns"}
	if _, why := runsc(); why == "" {
		drivers = append(drivers, "gvisor")
	} else {
		t.Logf("gvisor not tested: %s", why)
	}
	const q = "?graph=main"
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	ok := func(r reply, status int) map[string]any {
		t.Helper()
		if r.status != status {
			t.Fatalf("want %d: %d %s", status, r.status, r.body)
		}
		return r.obj(t)
	}
	usageOf := func(rec map[string]any) (float64, float64) {
		u := rec["usage"].(map[string]any)
		return u["vcpu_ms"].(float64), u["gib_ms"].(float64)
	}
	within := func(what string, got, want, frac float64) {
		t.Helper()
		if math.Abs(got-want) > want*frac {
			t.Errorf("%s: %.0f, want %.0f within %.0f%%", what, got, want, frac*100)
		} else {
			t.Logf("%s: %.1f (want %.0f ± %.0f%%)", what, got, want, frac*100)
		}
	}
	for _, iso := range drivers {
		t.Run(iso, func(t *testing.T) {
			// 1 s of CPU at cpus 1.
			run := ok(s.call("POST", "/v1/sandboxes"+q, "", idem(iso+"-burn"), fmt.Sprintf(
				`{"run": {"code": %q, "input": 1.0}, "limits": {"cpus": 1}, "isolation": %q}`, burnCode, iso)), 200)
			cmd := ok(s.call("GET", "/v1/commands/"+run["command"].(string)+q, "", nil, ""), 200)
			cpu, _ := usageOf(cmd)
			if iso == "gvisor" {
				// gVisor's clocks inside count time its Sentry was descheduled on a loaded host:
				// 1 s of process_time inside is less host CPU. The cgroup is what is metered.
				t.Logf("gvisor: a run that saw 1 s of process_time used %.0f vcpu_ms on the host", cpu)
			} else {
				within(iso+": vcpu_ms of a run that burns 1 s", cpu, 1000, 0.15)
			}

			// A 512 MiB sandbox held by a command for 2 s.
			sb := ok(s.call("POST", "/v1/sandboxes"+q, "", idem(iso+"-sb"), fmt.Sprintf(`{"limits": {"memory_mib": 512}, "isolation": %q}`, iso)), 201)
			sbx := sb["id"].(string)
			slept := ok(s.call("POST", "/v1/sandboxes/"+sbx+"/commands"+q, "", idem(iso+"-sleep"), `{"argv": ["sleep", "2"], "wait_ms": 30000}`), 200)
			_, mem := usageOf(slept)
			within(iso+": gib_ms of a command holding 512 MiB for 2 s", mem, 1000, 0.15)
			// A running sandbox's usage is read from its cgroup when asked, not only at its end.
			if _, sbMem := usageOf(ok(s.call("GET", "/v1/sandboxes/"+sbx+q, "", nil, ""), 200)); sbMem < mem {
				t.Errorf("%s: the running sandbox's gib_ms %.0f is below its command's %.0f", iso, sbMem, mem)
			}

			// A workflow run's budget of 300 ms of CPU stops a run that would burn forever.
			wf := "wf-" + iso
			ok(s.call("PUT", "/v1/budgets/"+wf+"/r1"+q, "", nil, `{"vcpu_ms": 300}`), 200)
			stopped := ok(s.call("POST", "/v1/sandboxes"+q, "", idem(iso+"-over"), fmt.Sprintf(
				`{"run": {"code": %q, "input": -1}, "limits": {"cpus": 1}, "timeout_ms": 30000, "isolation": %q, "origin": {"workflow": %q, "run": "r1"}}`,
				burnCode, iso, wf)), 200)
			rec := ok(s.call("GET", "/v1/commands/"+stopped["command"].(string)+q, "", nil, ""), 200)
			cpu, _ = usageOf(rec)
			if rec["status"] != "budget_exceeded" || cpu < 300 || cpu > 300+overshootMs {
				t.Errorf("a run past its workflow's budget of 300 vcpu_ms: status %v, vcpu_ms %.0f (want budget_exceeded, 300 to %d)", rec["status"], cpu, 300+overshootMs)
			} else {
				t.Logf("%s: a run past a budget of 300 vcpu_ms was stopped at %.0f vcpu_ms after %v ms", iso, cpu, rec["duration_ms"])
			}
			r := s.call("POST", "/v1/sandboxes"+q, "", idem(iso+"-after"), fmt.Sprintf(
				`{"run": {"code": "def run(i, c):\n    return 1"}, "isolation": %q, "origin": {"workflow": %q, "run": "r1"}}`, iso, wf))
			if r.status != 402 || r.errCode(t) != "budget_exceeded" {
				t.Errorf("a run after the budget ran out: %d %s", r.status, r.body)
			}

			// A grant with a budget of 300 ms of CPU stops a command in a sandbox.
			g := ok(s.call("POST", "/v1/grants"+q, "", nil, fmt.Sprintf(
				`{"ttl_seconds": 120, "origin": {"workflow": %q, "run": "r2", "step": "spin", "attempt": "1"}, "budget": {"vcpu_ms": 300}}`, wf)), 201)
			token := g["token"].(string)
			defer func() {
				if strings.Contains(s.stderr.String(), token) {
					t.Errorf("the grant's token is in the server's log")
				}
			}()
			spun := ok(s.call("POST", "/v1/sandboxes/"+sbx+"/commands"+q, token, idem(iso+"-spin"),
				`{"argv": ["sh", "-c", "while :; do :; done"], "timeout_ms": 30000, "wait_ms": 30000}`), 200)
			cpu, _ = usageOf(spun)
			if spun["status"] != "budget_exceeded" || cpu < 300 || cpu > 300+overshootMs {
				t.Errorf("a command past its grant's budget of 300 vcpu_ms: status %v, vcpu_ms %.0f (want budget_exceeded, 300 to %d)", spun["status"], cpu, 300+overshootMs)
			}
			if o := spun["origin"].(map[string]any); o["grant"] != g["id"] || o["step"] != "spin" || o["attempt"] != "1" {
				t.Errorf("the command's origin: %v", o)
			}
			if left := spun["budget"].(map[string]any)["grant"].(map[string]any); left["vcpu_ms"] != 0.0 {
				t.Errorf("the budget left after it: %v", spun["budget"])
			}
			r = s.call("POST", "/v1/sandboxes/"+sbx+"/commands"+q, token, idem(iso+"-spin2"), `{"argv": ["true"]}`)
			if r.status != 402 || r.errCode(t) != "budget_exceeded" {
				t.Errorf("a command after the grant's budget ran out: %d %s", r.status, r.body)
			}
			ok(s.call("DELETE", "/v1/sandboxes/"+sbx+q, "", nil, ""), 200)
		})
	}

	// The usage ledger sums the commands' records.
	var sumCPU, sumMem float64
	n := 0
	l := ok(s.call("GET", "/v1/commands"+q+"&limit=100", "", nil, ""), 200)
	for _, c := range l["data"].([]any) {
		c := c.(map[string]any)
		if c["usage"] == nil {
			continue
		}
		cpu, mem := usageOf(c)
		sumCPU, sumMem, n = sumCPU+cpu, sumMem+mem, n+1
	}
	u := ok(s.call("GET", "/v1/usage"+q+"&group_by=workflow", "", nil, ""), 200)
	tot := u["total"].(map[string]any)
	if int(tot["commands"].(float64)) != n || math.Abs(tot["vcpu_ms"].(float64)-sumCPU) > 0.01 || math.Abs(tot["gib_ms"].(float64)-sumMem) > 0.01 {
		t.Errorf("usage %v; the records sum to %d commands, %.3f vcpu_ms, %.3f gib_ms", tot, n, sumCPU, sumMem)
	}
	if out, errOut, err := s.cli("usage", "--by", "workflow"); err != nil || !strings.Contains(out, "total") || !strings.Contains(out, "wf-ns") {
		t.Errorf("lbb usage --by workflow: %v\n%s%s", err, out, errOut)
	}
	if out, errOut, err := s.cli("budget", "get", "wf-ns", "r1"); err != nil || !strings.Contains(out, "used") {
		t.Errorf("lbb budget get: %v\n%s%s", err, out, errOut)
	}
	if out, errOut, err := s.cli("grant", "mint", "--ttl", "1m", "--workflow", "wf-cli", "--runs", "1"); err != nil || !strings.Contains(out, "lbb_gt_") {
		t.Errorf("lbb grant mint: %v\n%s", err, errOut)
	}
	if out, errOut, err := s.cli("grant", "list"); err != nil || !strings.Contains(out, "wf-cli") {
		t.Errorf("lbb grant list: %v\n%s%s", err, out, errOut)
	}
	if m := s.metrics(t); !strings.Contains(m, `lbb_usage_vcpu_ms_total{graph="main"}`) {
		t.Errorf("no usage counter in /metrics")
	}
}

// overshootMs is how far past its budget a CPU-bound command may run: the budget is checked
// every 100 ms, and the stop takes a moment on a loaded machine.
const overshootMs = 400
