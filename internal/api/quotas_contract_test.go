package api_test

import (
	"strings"
	"testing"

	"github.com/littlebigbrain/lbb/internal/config"
)

// quotaContract exercises the answers of the graph's quotas (413 quota_bytes_exceeded, 429
// quota_exceeded) on a server of its own whose graph has tight quotas, and checks GET
// /v1/quotas against what the graph then holds.
func quotaContract(t *testing.T, d doc, seen map[string]bool) {
	s := newServer(t, func(c *config.Config) {
		c.MaxRunningPerGraph, c.MaxSandboxesPerGraph = 5, 5
		c.Quotas = config.Quotas{Files: 1, FileBytes: 100, Snapshots: 2, SnapshotBytes: 1 << 20, Checkpoints: 1, CheckpointBytes: 1 << 20,
			StoppedSandboxes: 2, StoppedDiskBytes: 1100 << 20}
	})
	check := checker(t, d, s, seen)
	admin, q := s.admin, "?graph=main"
	wantCode := func(r reply, code string) {
		t.Helper()
		if got := r.json(t)["error"].(map[string]any)["code"]; got != code {
			t.Fatalf("code %v, want %s: %s", got, code, r.body)
		}
	}

	const gf = "/v1/files"
	f := check("createFile", gf, 201, "POST", gf+q+"&name=a", admin, nil, "0123456789").json(t)
	wantCode(check("createFile", gf, 429, "POST", gf+q+"&name=b", admin, nil, "x"), "quota_exceeded")
	check("deleteGraphFile", gf+"/{id}", 200, "DELETE", gf+"/"+f["id"].(string)+q, admin, nil, "")
	wantCode(check("createFile", gf, 413, "POST", gf+q+"&name=b", admin, nil, strings.Repeat("x", 101)), "quota_bytes_exceeded")

	// Four sandboxes, two with small disks: stopped ones count toward the graph's quotas at
	// their disks' size limits (1100 MiB, two stopped at most).
	const sb, st = "/v1/sandboxes", "/v1/sandboxes/{id}/stop"
	create := func(body string) string {
		return check("createSandbox", sb, 201, "POST", sb+q, admin, nil, body).json(t)["id"].(string)
	}
	a, b, c, dd := create(`{}`), create(`{}`), create(`{"limits": {"disk_mib": 16}}`), create(`{"limits": {"disk_mib": 16}}`)
	check("stopSandbox", st, 200, "POST", sb+"/"+a+"/stop"+q, admin, nil, "")
	wantCode(check("stopSandbox", st, 413, "POST", sb+"/"+b+"/stop"+q, admin, nil, ""), "quota_bytes_exceeded")
	check("stopSandbox", st, 200, "POST", sb+"/"+c+"/stop"+q, admin, nil, "")
	wantCode(check("stopSandbox", st, 429, "POST", sb+"/"+dd+"/stop"+q, admin, nil, ""), "quota_exceeded")
	// Five sandboxes hold a disk: no sixth, stopped ones counted.
	e := create(`{}`)
	wantCode(check("createSandbox", sb, 429, "POST", sb+q, admin, nil, `{}`), "quota_exceeded")
	check("deleteSandbox", sb+"/{id}", 200, "DELETE", sb+"/"+e+q, admin, nil, "")

	// One checkpoint of at most 1 MiB: dd's workspace takes 2 MiB.
	const pa = "/v1/sandboxes/{id}/pause"
	check("writeFile", "/v1/sandboxes/{id}/files/content", 200, "PUT", sb+"/"+dd+"/files/content"+q+"&path=big", admin, nil, strings.Repeat("x", 2<<20))
	check("pauseSandbox", pa, 200, "POST", sb+"/"+b+"/pause"+q, admin, nil, "")
	wantCode(check("pauseSandbox", pa, 429, "POST", sb+"/"+dd+"/pause"+q, admin, nil, ""), "quota_exceeded")
	check("resumeSandbox", "/v1/sandboxes/{id}/resume", 200, "POST", sb+"/"+b+"/resume"+q, admin, nil, "")
	wantCode(check("pauseSandbox", pa, 413, "POST", sb+"/"+dd+"/pause"+q, admin, nil, ""), "quota_bytes_exceeded")
	if got := check("getSandbox", sb+"/{id}", 200, "GET", sb+"/"+dd+q, admin, nil, "").json(t); got["status"] != "running" {
		t.Fatalf("after a pause past the quota: %v", got)
	}

	// Two snapshots of at most 1 MiB in all.
	const sn, fk = "/v1/sandboxes/{id}/snapshot", "/v1/sandboxes/{id}/fork"
	check("snapshotSandbox", sn, 201, "POST", sb+"/"+b+"/snapshot"+q, admin, nil, "")
	wantCode(check("snapshotSandbox", sn, 413, "POST", sb+"/"+dd+"/snapshot"+q, admin, nil, ""), "quota_bytes_exceeded")
	wantCode(check("forkSandbox", fk, 413, "POST", sb+"/"+dd+"/fork"+q, admin, nil, ""), "quota_bytes_exceeded")
	check("snapshotSandbox", sn, 201, "POST", sb+"/"+b+"/snapshot"+q, admin, nil, "")
	wantCode(check("snapshotSandbox", sn, 429, "POST", sb+"/"+b+"/snapshot"+q, admin, nil, ""), "quota_exceeded")
	wantCode(check("forkSandbox", fk, 429, "POST", sb+"/"+b+"/fork"+q, admin, nil, ""), "quota_exceeded")

	got := check("getQuotas", "/v1/quotas", 200, "GET", "/v1/quotas"+q, admin, nil, "").json(t)["quotas"].(map[string]any)
	for name, want := range map[string]float64{"running_sandboxes": 2, "sandboxes": 4, "stopped_sandboxes": 2,
		"stopped_disk_bytes": 1040 << 20, "checkpoints": 0, "files": 0, "snapshots": 2} {
		if u := got[name].(map[string]any)["usage"]; u != want {
			t.Errorf("quota %s: usage %v, want %v", name, u, want)
		}
	}
}
