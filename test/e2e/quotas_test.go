//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/littlebigbrain/lbb/internal/blobs"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// TestQuotas: a real `lbb serve` with tight quotas per graph answers 429 quota_exceeded and
// 413 quota_bytes_exceeded with the quota, usage and limit; a blob leaves the blob directory
// when its last File is deleted, not before, and a workspace that imported it keeps its copy;
// a result past --max-result-bytes is a File the answer names; stopped sandboxes count
// toward the graph's cap of sandboxes, and one at the cap still resumes.
func TestQuotas(t *testing.T) {
	s := startServer(t, "--quota-files", "2", "--quota-file-bytes", "4096", "--max-result-bytes", "1024",
		"--quota-stopped-sandboxes", "1", "--max-sandboxes-per-graph", "3", "--max-running-per-graph", "3")
	const q = "?graph=main"
	upload := func(name, data string) reply {
		return s.call("POST", "/v1/files"+q+"&name="+name, "", map[string]string{"Content-Type": "application/octet-stream"}, data)
	}
	created := func(r reply) map[string]any {
		t.Helper()
		if r.status != 201 && r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		return r.obj(t)
	}
	wantQuota := func(r reply, status int, code, quota string, usage, limit int64) {
		t.Helper()
		msg, _ := r.obj(t)["error"].(map[string]any)["message"].(string)
		if r.status != status || r.errCode(t) != code || !strings.Contains(msg, "quota "+quota+" ") ||
			!strings.Contains(msg, fmt.Sprintf("usage %d", usage)) || !strings.Contains(msg, fmt.Sprintf("limit %d", limit)) {
			t.Fatalf("want %d %s naming quota %s, usage %d, limit %d: %d %s", status, code, quota, usage, limit, r.status, r.body)
		}
	}

	// Two Files with the same bytes share one blob: it goes with the second.
	same := "bytes two Files share"
	blob := filepath.Join(s.dataDir, "blobs", "sha256", blobs.Digest([]byte(same))[:2], blobs.Digest([]byte(same)))
	f1, f2 := created(upload("one", same)), created(upload("two", same))
	if _, err := os.Stat(blob); err != nil {
		t.Fatalf("the blob: %v", err)
	}
	c, sb := s.sandbox(t, lbb.CreateParams{})
	if r := s.call("PUT", "/v1/sandboxes/files/content"+q+"&sandbox="+sb.ID+"&path=imported.txt&source_sha256="+blobs.Digest([]byte(same)), "", nil, ""); r.status != 200 {
		t.Fatalf("import: %d %s", r.status, r.body)
	}
	if r := s.call("DELETE", "/v1/files/"+f1["id"].(string)+q, "", nil, ""); r.status != 200 || r.obj(t)["id"] != f1["id"] {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if _, err := os.Stat(blob); err != nil {
		t.Fatalf("the blob went while a File names it: %v", err)
	}
	if r := s.call("GET", "/v1/files/"+f2["id"].(string)+"/content"+q, "", nil, ""); r.status != 200 || string(r.body) != same {
		t.Fatalf("the other File: %d %q", r.status, r.body)
	}
	if r := s.call("DELETE", "/v1/files/"+f2["id"].(string)+q, "", nil, ""); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if _, err := os.Stat(blob); !os.IsNotExist(err) {
		t.Fatalf("the blob stayed after its last File was deleted: %v", err)
	}
	if r := s.call("DELETE", "/v1/files/"+f2["id"].(string)+q, "", nil, ""); r.status != 404 {
		t.Fatalf("deleted twice: %d %s", r.status, r.body)
	}
	rc, err := c.Files.Read(bg, sb.ID, "imported.txt")
	if err != nil {
		t.Fatalf("the workspace's copy: %v", err)
	}
	rc.Close()

	// A result past the cap is a File of the graph, and counts toward its quotas.
	big := strings.Repeat("r", 2000)
	_, run := s.run("big-result", `{"run": {"code": "def run(input, config):\n    return input", "input": "`+big+`"}}`)
	rf, _ := run["result_file"].(string)
	if run["result"] != nil || run["result_truncated"] != true || run["result_bytes"] != 2002.0 || !strings.HasPrefix(rf, "fil_") {
		t.Fatalf("a large result: %v", run)
	}
	if r := s.call("GET", "/v1/files/"+rf+"/content"+q, "", nil, ""); r.status != 200 || string(r.body) != `"`+big+`"` {
		t.Fatalf("its File: %d, %d bytes", r.status, len(r.body))
	}
	if cmd := s.call("GET", "/v1/commands/"+run["command"].(string)+q, "", nil, "").obj(t); cmd["result_file"] != rf || cmd["result"] != nil {
		t.Fatalf("its record: %v", cmd)
	}
	a := created(upload("a", "aaaa"))
	wantQuota(upload("c", "c"), 429, "quota_exceeded", "files", 2, 2)
	if r := s.call("DELETE", "/v1/files/"+a["id"].(string)+q, "", nil, ""); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	wantQuota(upload("big", strings.Repeat("b", 3000)), 413, "quota_bytes_exceeded", "file_bytes", 2002, 4096)

	out, _, err := s.cli("quotas", "--json")
	if err != nil {
		t.Fatalf("lbb quotas: %v", err)
	}
	var qs struct {
		Quotas map[string]struct{ Usage, Limit int64 } `json:"quotas"`
	}
	if err := json.Unmarshal([]byte(out), &qs); err != nil || qs.Quotas["files"].Usage != 1 || qs.Quotas["file_bytes"].Limit != 4096 {
		t.Fatalf("lbb quotas: %s %v", out, err)
	}
	if out, errOut, err := s.cli("files", "delete", rf); err != nil || !strings.Contains(out, "deleted "+rf) {
		t.Fatalf("lbb files delete: %v %s %s", err, out, errOut)
	}

	// Stopped sandboxes hold their disks: they count toward the graph's three sandboxes, and
	// the graph keeps one stopped at most. sb is the first of the three.
	const sbx = "/v1/sandboxes"
	newSB := func() string { return created(s.call("POST", sbx+q, "", nil, `{}`))["id"].(string) }
	b := newSB()
	if r := s.call("POST", sbx+"/"+sb.ID+"/stop"+q, "", nil, ""); r.status != 200 {
		t.Fatalf("stop: %d %s", r.status, r.body)
	}
	wantQuota(s.call("POST", sbx+"/"+b+"/stop"+q, "", nil, ""), 429, "quota_exceeded", "stopped_sandboxes", 1, 1)
	cc := newSB()
	wantQuota(s.call("POST", sbx+q, "", nil, `{}`), 429, "quota_exceeded", "sandboxes", 3, 3)
	if r := s.call("POST", sbx+"/"+sb.ID+"/resume"+q, "", nil, ""); r.status != 200 || r.obj(t)["status"] != "running" {
		t.Fatalf("resume at the cap: %d %s", r.status, r.body)
	}
	for _, id := range []string{b, cc} {
		if r := s.call("DELETE", sbx+"/"+id+q, "", nil, ""); r.status != 200 {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
	}
	s.call("DELETE", sbx+"/"+newSB()+q, "", nil, "")
}

// TestCheckpointQuotaGvisor: on gvisor a pause is a checkpoint with memory whose size the
// record says; a pause past the graph's checkpoints quota is undone by restoring the
// checkpoint, so the sandbox's processes carry on; a snapshot past its quota is refused.
func TestCheckpointQuotaGvisor(t *testing.T) {
	requireGvisor(t)
	s := startServer(t, "--runtime", "gvisor", "--pool=false", "--quota-checkpoints", "1", "--quota-snapshots", "1")
	c := s.client(t, "main")
	a := newSandbox(t, c, lbb.CreateParams{ExpiresInSeconds: 900})
	b := newSandbox(t, c, lbb.CreateParams{ExpiresInSeconds: 900})
	st := startHolder(t, c, b.ID)
	p, err := c.Sandboxes.Pause(bg, a.ID)
	if err != nil || p.Status != "paused" || p.CheckpointBytes <= 0 {
		t.Fatalf("pause: %+v %v", p, err)
	}
	_, err = c.Sandboxes.Pause(bg, b.ID)
	if lbb.StatusOf(err) != 429 || lbb.CodeOf(err) != lbb.CodeQuotaExceeded || !strings.Contains(err.Error(), "quota checkpoints ") {
		t.Fatalf("a second checkpoint: %v", err)
	}
	if got, err := c.Sandboxes.Get(bg, b.ID); err != nil || got.Status != "running" {
		t.Fatalf("after a pause past the quota: %+v %v", got, err)
	}
	carriesOn(t, c, b.ID, "after a pause past the quota", st)
	q, err := c.Quotas(bg)
	if err != nil || q.Quotas.Checkpoints.Usage != 1 || q.Quotas.CheckpointBytes.Usage != p.CheckpointBytes {
		t.Fatalf("quotas: %+v %v", q, err)
	}
	if _, err := c.Sandboxes.Snapshot(bg, b.ID, lbb.SnapshotRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sandboxes.Snapshot(bg, b.ID, lbb.SnapshotRequest{}); lbb.CodeOf(err) != lbb.CodeQuotaExceeded {
		t.Fatalf("a second snapshot: %v", err)
	}
}
