package control_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/control/controltest"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
)

// Quotas per graph, deleting Files with their blobs, and run results past the cap, on the
// real SQLite store and blob directory.

// envBlobs is a service with the fake runner and a blob store in dir/blobs.
type envBlobs struct {
	*env
	bs *blobs.Local
}

func setupBlobs(t *testing.T, tweak func(*config.Config)) *envBlobs {
	t.Helper()
	dir := t.TempDir()
	bs, err := blobs.NewLocal(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	r := controltest.New()
	e := serve(t, dir, control.Options{Store: openStore(t, dir), Host: r.On(nil), Blobs: bs, Config: testConfig(dir, tweak),
		Image: control.Image{ID: "img1"}})
	e.runner = r
	return &envBlobs{env: e, bs: bs}
}

func (e *env) upload(t *testing.T, c control.Caller, name, data string) (store.File, error) {
	t.Helper()
	resp, err := e.svc.UploadFile(ctx, c, name, strings.NewReader(data), "")
	if err != nil {
		return store.File{}, err
	}
	var f store.File
	if err := json.Unmarshal(resp.Body, &f); err != nil {
		t.Fatal(err)
	}
	return f, nil
}

func isNull(raw json.RawMessage) bool { return raw == nil || string(raw) == "null" }

// blobPath is where the blob directory keeps the bytes with this digest.
func blobPath(dir, sha string) string { return filepath.Join(dir, "blobs", "sha256", sha[:2], sha) }

// wantQuota checks err is the quota error of name, with class and code, naming its usage
// and limit.
func wantQuota(t *testing.T, what string, err error, name string, usage, limit int64) {
	t.Helper()
	class, code := errdefs.ClassLimitExceeded, errdefs.CodeQuotaExceeded
	if strings.HasSuffix(name, "_bytes") {
		class, code = errdefs.ClassPayloadTooLarge, errdefs.CodeQuotaBytesExceeded
	}
	wantErrCode(t, what, err, class, code)
	for _, s := range []string{"quota " + name + " ", fmt.Sprintf("usage %d", usage), fmt.Sprintf("limit %d", limit)} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%s: %q does not say %q", what, err, s)
		}
	}
}

// TestFileQuotas: Files count and bytes per graph, each graph its own; a delete makes room;
// GET /v1/quotas says the same.
func TestFileQuotas(t *testing.T) {
	e := setupBlobs(t, func(c *config.Config) { c.Quotas.Files, c.Quotas.FileBytes = 2, 10 })
	if _, err := e.upload(t, e.caller, "a", "123456"); err != nil {
		t.Fatal(err)
	}
	_, err := e.upload(t, e.caller, "b", "12345")
	wantQuota(t, "5 bytes past 6 of 10", err, control.QuotaFileBytes, 6, 10)
	uploadB := func() (control.Response, error) {
		return e.svc.UploadFile(ctx, e.caller, "b", strings.NewReader("1234"), "upload-b")
	}
	resp, err := uploadB()
	if err != nil {
		t.Fatal(err)
	}
	var b store.File
	json.Unmarshal(resp.Body, &b)
	_, err = e.upload(t, e.caller, "c", "")
	wantQuota(t, "a third File", err, control.QuotaFiles, 2, 2)
	// The retry of the upload that filled the quota gets its answer, not a refusal.
	if again, err := uploadB(); err != nil || !again.Replayed || !bytes.Equal(again.Body, resp.Body) {
		t.Fatalf("retry of the upload that filled the quota: %s %v", again.Body, err)
	}
	// Another graph has quotas of its own.
	other := control.Caller{Graph: "other", Key: e.caller.Key}
	if _, err := e.upload(t, other, "a", "1234567890"); err != nil {
		t.Fatal(err)
	}
	q, err := e.svc.Quotas(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	if f, fb := q.Quotas[control.QuotaFiles], q.Quotas[control.QuotaFileBytes]; f != (control.Quota{Usage: 2, Limit: 2, Unit: "count"}) ||
		fb != (control.Quota{Usage: 10, Limit: 10, Unit: "bytes"}) || q.MaxResultBytes != 1<<20 {
		t.Fatalf("quotas: %+v", q)
	}
	if _, err := e.svc.DeleteFile(ctx, "main", b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.upload(t, e.caller, "c", "1234"); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	// No blob is left of the refused uploads: only the three Files' bytes.
	placed, trashed, err := e.bs.Digests(ctx)
	if err != nil || len(placed) != 3 || len(trashed) != 0 {
		t.Fatalf("blobs %v, trash %v, %v", placed, trashed, err)
	}
}

// TestDeleteFile: the blob goes with the last File that names it, whatever the graph; a File
// a template names stays; a workspace's copy is its own.
func TestDeleteFile(t *testing.T) {
	e := setupBlobs(t, nil)
	other := control.Caller{Graph: "other", Key: e.caller.Key}
	a, err := e.upload(t, e.caller, "a", "same bytes")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.upload(t, other, "b", "same bytes")
	if err != nil {
		t.Fatal(err)
	}
	p := blobPath(e.dir, a.SHA256)
	if _, err := e.svc.DeleteFile(ctx, "other", a.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("another graph's File: %v", err)
	}
	got, err := e.svc.DeleteFile(ctx, "main", a.ID)
	if err != nil || got.ID != a.ID {
		t.Fatalf("delete: %+v %v", got, err)
	}
	if !exists(p) {
		t.Fatal("the blob went while graph other's File names it")
	}
	if _, err := e.svc.DeleteFile(ctx, "main", a.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("deleted twice: %v", err)
	}
	if _, _, err := e.svc.OpenGraphFile(ctx, "other", b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.DeleteFile(ctx, "other", b.ID); err != nil {
		t.Fatal(err)
	}
	if exists(p) {
		t.Fatal("the blob stayed after its last File was deleted")
	}

	// A template version names a File by id, or by sha256: it stays while no other File of
	// the graph has its bytes.
	c, _ := e.upload(t, e.caller, "c", "template bytes")
	d, _ := e.upload(t, e.caller, "d", "more template bytes")
	if _, err := e.svc.CreateTemplate(ctx, e.caller, control.TemplateRequest{Name: "t", Code: "def run(i, c): return i",
		Files: []store.TemplateFile{{File: c.ID, Path: "c.txt"}, {File: d.SHA256, Path: "d.txt"}}}); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.DeleteFile(ctx, "main", c.ID)
	wantErrCode(t, "a File a template names", err, errdefs.ClassConflict, errdefs.CodeFileInUse)
	if !strings.Contains(err.Error(), "t@1") {
		t.Fatalf("the error names no version: %v", err)
	}
	_, err = e.svc.DeleteFile(ctx, "main", d.ID)
	wantErrCode(t, "a File a template names by sha256", err, errdefs.ClassConflict, errdefs.CodeFileInUse)
	d2, _ := e.upload(t, e.caller, "d2", "more template bytes")
	if _, err := e.svc.DeleteFile(ctx, "main", d.ID); err != nil {
		t.Fatalf("another File has its bytes: %v", err)
	}
	if _, err := e.svc.DeleteFile(ctx, "main", d2.ID); errdefs.CodeOf(err) != errdefs.CodeFileInUse {
		t.Fatalf("the last File with the bytes a template names: %v", err)
	}
	if !exists(blobPath(e.dir, c.SHA256)) || !exists(blobPath(e.dir, d.SHA256)) {
		t.Fatal("a File that stays lost its blob")
	}
}

// TestDeleteFileRace: Files of the same bytes uploaded while the last one is deleted never
// lose their blob: the store orders the two, and the blob follows.
func TestDeleteFileRace(t *testing.T) {
	e := setupBlobs(t, nil)
	for round := range 30 {
		data := fmt.Sprint("racing bytes ", round)
		old, err := e.upload(t, e.caller, "old", data)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var fresh store.File
		var uerr, derr error
		wg.Add(2)
		go func() { defer wg.Done(); fresh, uerr = e.upload(t, e.caller, "new", data) }()
		go func() { defer wg.Done(); _, derr = e.svc.DeleteFile(ctx, "main", old.ID) }()
		wg.Wait()
		if uerr != nil || derr != nil {
			t.Fatal(uerr, derr)
		}
		_, rc, err := e.svc.OpenGraphFile(ctx, "main", fresh.ID)
		if err != nil {
			t.Fatalf("round %d: the new File lost its blob: %v", round, err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != data {
			t.Fatalf("round %d: %q", round, b)
		}
		if _, err := e.svc.DeleteFile(ctx, "main", fresh.ID); err != nil {
			t.Fatal(err)
		}
		if exists(blobPath(e.dir, fresh.SHA256)) {
			t.Fatalf("round %d: the blob outlived its Files", round)
		}
	}
}

// TestSweepBlobs: at start, a blob no File names goes (a crash between putting it in place
// and its record), and one in the trash that a File names comes back (a crash before its
// deletion committed).
func TestSweepBlobs(t *testing.T) {
	e := setupBlobs(t, nil)
	f, err := e.upload(t, e.caller, "kept", "named bytes")
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := e.bs.Put(ctx, strings.NewReader("nobody names these"), 0)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := e.bs.Put(ctx, strings.NewReader("deleted, not purged"), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, sha := range []string{f.SHA256, gone.SHA256} {
		if err := e.bs.Trash(ctx, sha); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := e.svc.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec.BlobsRemoved != 1 || exists(blobPath(e.dir, orphan.SHA256)) {
		t.Fatalf("the orphan: %+v", rec)
	}
	placed, trashed, _ := e.bs.Digests(ctx)
	if len(placed) != 1 || placed[0] != f.SHA256 || len(trashed) != 0 {
		t.Fatalf("placed %v, trashed %v", placed, trashed)
	}
}

// TestLargeResult: a result past --max-result-bytes is kept as a File of the graph that the
// record and the answer name; it counts toward the Files quotas, and with no room the record
// says why there is none.
func TestLargeResult(t *testing.T) {
	e := setupBlobs(t, func(c *config.Config) { c.MaxResultBytes, c.Quotas.Files = 1024, 1 })
	big := `"` + strings.Repeat("r", 2000) + `"`
	resp, err := e.svc.Run(ctx, e.caller, run("echo", big), "big", "h-big")
	if err != nil {
		t.Fatal(err)
	}
	r := decodeResult(t, resp)
	if !isNull(r.Result) || !r.ResultTruncated || r.ResultBytes != int64(len(big)) || r.ResultFile == "" || !r.OK {
		t.Fatalf("answer: %s", resp.Body)
	}
	f, rc, err := e.svc.OpenGraphFile(ctx, "main", r.ResultFile)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != big || f.Origin.Kind != store.FileFromResult || f.Origin.Command != r.Command || f.Name != r.Command+"-result.json" {
		t.Fatalf("the File: %+v %d bytes", f, len(got))
	}
	cmd, _ := e.st.GetCommand(ctx, "main", r.Command)
	if cmd.Result != nil || !cmd.ResultTruncated || cmd.ResultFile != f.ID {
		t.Fatalf("the record: %+v", cmd)
	}
	again, err := e.svc.Run(ctx, e.caller, run("echo", big), "big", "h-big")
	if err != nil || !bytes.Equal(again.Body, resp.Body) {
		t.Fatalf("replay: %s %v", again.Body, err)
	}
	// The Files quota is full: the next large result is not kept, and the record says so.
	resp, err = e.svc.Run(ctx, e.caller, run("echo", big), "big2", "h-big2")
	if err != nil {
		t.Fatal(err)
	}
	r = decodeResult(t, resp)
	if !isNull(r.Result) || !r.ResultTruncated || r.ResultFile != "" || !strings.Contains(r.Error, "quota files") {
		t.Fatalf("no room: %s", resp.Body)
	}
	// A result within the cap is the answer's.
	resp, _ = e.svc.Run(ctx, e.caller, run("echo", `[1,2]`), "small", "h-small")
	if r := decodeResult(t, resp); string(r.Result) != `[1,2]` || r.ResultTruncated {
		t.Fatalf("small: %s", resp.Body)
	}
}

// TestResultStoredOnce: a run's result is in its command record, not again in the answer its
// key keeps; a replay reads it back.
func TestResultStoredOnce(t *testing.T) {
	e := setup(t, nil)
	input := `{"marker":"` + strings.Repeat("m", 500) + `"}`
	first, err := e.svc.Run(ctx, e.caller, run("echo", input), "once", "h-once")
	if err != nil {
		t.Fatal(err)
	}
	if r := decodeResult(t, first); string(r.Result) != input {
		t.Fatalf("answer: %s", first.Body)
	}
	k, err := e.st.GetIdempotency(ctx, "main", "once")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(k.ResponseBody, []byte("mmmm")) || !bytes.Contains(k.ResponseBody, []byte(`"result":null`)) {
		t.Fatalf("the key keeps the result: %s", k.ResponseBody)
	}
	again, err := e.svc.Run(ctx, e.caller, run("echo", input), "once", "h-once")
	if err != nil || !again.Replayed || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("replay:\n%s\nwant\n%s", again.Body, first.Body)
	}
}

// TestSandboxCaps: stopped and paused sandboxes count toward the graph's cap of sandboxes
// (they hold a disk), not toward its running cap: a graph at its cap, all stopped, resumes
// any of them, and creates one once it deleted one.
func TestSandboxCaps(t *testing.T) {
	e := setup3(t, func(c *config.Config) { c.MaxRunningPerGraph, c.MaxSandboxesPerGraph = 2, 3 })
	var sbs []store.Sandbox
	for range 2 {
		sbs = append(sbs, e.create(t, control.CreateRequest{}))
	}
	_, err := e.svc.CreateSandbox(ctx, e.caller, control.CreateRequest{}, "", "")
	wantCode(t, err, errdefs.CodeTooManySandboxes)
	for _, sb := range sbs {
		if _, err := e.svc.StopSandbox(ctx, "main", sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	sbs = append(sbs, e.create(t, control.CreateRequest{}))
	if _, err := e.svc.StopSandbox(ctx, "main", sbs[2].ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.CreateSandbox(ctx, e.caller, control.CreateRequest{}, "", "")
	wantQuota(t, "a fourth sandbox, three stopped", err, control.QuotaSandboxes, 3, 3)
	// A one-call run starts a sandbox too.
	_, err = e.svc.Run(ctx, e.caller, run("echo", "1"), "one-call", "h")
	wantQuota(t, "a one-call run", err, control.QuotaSandboxes, 3, 3)
	for _, sb := range sbs[:2] {
		if got, err := e.svc.ResumeSandbox(ctx, "main", sb.ID); err != nil || got.Status != store.SandboxRunning {
			t.Fatalf("resume at the cap: %+v %v", got, err)
		}
	}
	_, err = e.svc.ResumeSandbox(ctx, "main", sbs[2].ID)
	wantCode(t, err, errdefs.CodeTooManySandboxes)
	if _, err := e.svc.DeleteSandbox(ctx, "main", sbs[0].ID); err != nil {
		t.Fatal(err)
	}
	if got, err := e.svc.ResumeSandbox(ctx, "main", sbs[2].ID); err != nil || got.Status != store.SandboxRunning {
		t.Fatalf("resume after a delete: %+v %v", got, err)
	}
	q, _ := e.svc.Quotas(ctx, "main")
	if q.Quotas[control.QuotaSandboxes].Usage != 2 || q.Quotas[control.QuotaRunning].Usage != 2 {
		t.Fatalf("quotas: %+v", q.Quotas)
	}
}

// TestStopQuotas: a stop that would keep a disk past the graph's quotas of stopped
// sandboxes is refused, and the sandbox runs on.
func TestStopQuotas(t *testing.T) {
	e := setup3(t, func(c *config.Config) {
		c.Quotas.StoppedSandboxes, c.Quotas.StoppedDiskBytes = 2, 100<<20
	})
	a := e.create(t, control.CreateRequest{Limits: &store.Limits{DiskMiB: 60}})
	b := e.create(t, control.CreateRequest{Limits: &store.Limits{DiskMiB: 60}})
	c := e.create(t, control.CreateRequest{Limits: &store.Limits{DiskMiB: 40}})
	d := e.create(t, control.CreateRequest{Limits: &store.Limits{DiskMiB: 1}})
	if _, err := e.svc.StopSandbox(ctx, "main", a.ID); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.StopSandbox(ctx, "main", b.ID)
	wantQuota(t, "120 MiB of 100", err, control.QuotaStoppedDiskBytes, 60<<20, 100<<20)
	if got, _ := e.st.GetSandbox(ctx, "main", b.ID); got.Status != store.SandboxRunning {
		t.Fatalf("a refused stop: %+v", got)
	}
	if _, err := e.svc.StopSandbox(ctx, "main", c.ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.StopSandbox(ctx, "main", d.ID)
	wantQuota(t, "a third stopped", err, control.QuotaStopped, 2, 2)
	// Deleting b instead of stopping it is always allowed.
	if _, err := e.svc.DeleteSandbox(ctx, "main", b.ID); err != nil {
		t.Fatal(err)
	}
	q, _ := e.svc.Quotas(ctx, "main")
	if got := q.Quotas[control.QuotaStoppedDiskBytes]; got.Usage != 100<<20 || got.Limit != 100<<20 {
		t.Fatalf("stopped disk bytes: %+v", got)
	}
}

// TestCheckpointQuotas: a pause whose checkpoint goes past the graph's quotas is undone: the
// sandbox runs on, its workspace whole.
func TestCheckpointQuotas(t *testing.T) {
	e, _ := newSnapEnv(t, func(c *config.Config) { c.Quotas.Checkpoints, c.Quotas.CheckpointBytes = 1, 1<<20 })
	a := e.create(t, control.CreateRequest{})
	b := e.create(t, control.CreateRequest{})
	p, err := e.svc.PauseSandbox(ctx, "main", a.ID)
	if err != nil || p.CheckpointBytes <= 0 || p.CheckpointBytes > 1<<20 {
		t.Fatalf("pause: %+v %v", p, err)
	}
	_, err = e.svc.PauseSandbox(ctx, "main", b.ID)
	wantQuota(t, "a second checkpoint", err, control.QuotaCheckpoints, 1, 1)
	if c, _ := e.exec(t, b.ID, control.ExecRequest{Argv: []string{"echo", "on"}, WaitMs: ms(30000)}, "b-on"); c.Stdout.Tail != "on\n" {
		t.Fatalf("after an undone pause: %+v", c)
	}
	if _, err := e.svc.ResumeSandbox(ctx, "main", a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.WriteFile(ctx, "main", b.ID, "big", bytes.NewReader(make([]byte, 2<<20))); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.PauseSandbox(ctx, "main", b.ID)
	wantErrCode(t, "a 2 MiB checkpoint", err, errdefs.ClassPayloadTooLarge, errdefs.CodeQuotaBytesExceeded)
	got, _ := e.st.GetSandbox(ctx, "main", b.ID)
	if got.Status != store.SandboxRunning || got.CheckpointBytes != 0 {
		t.Fatalf("after an undone pause: %+v", got)
	}
	if entries, err := e.svc.ListFiles(ctx, "main", b.ID, ".", false); err != nil || len(entries) != 1 || entries[0].Size != 2<<20 {
		t.Fatalf("workspace: %+v %v", entries, err)
	}
}

// TestSnapshotQuotas: snapshots count and bytes per graph; one past them is not kept.
func TestSnapshotQuotas(t *testing.T) {
	e, _ := newSnapEnv(t, func(c *config.Config) { c.Quotas.Snapshots, c.Quotas.SnapshotBytes = 2, 1<<20 })
	small := e.create(t, control.CreateRequest{})
	big := e.create(t, control.CreateRequest{})
	if _, err := e.svc.WriteFile(ctx, "main", big.ID, "big", bytes.NewReader(make([]byte, 2<<20))); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.SnapshotSandbox(ctx, e.caller, small.ID, control.SnapshotRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.SnapshotSandbox(ctx, e.caller, big.ID, control.SnapshotRequest{})
	wantErrCode(t, "a 2 MiB snapshot", err, errdefs.ClassPayloadTooLarge, errdefs.CodeQuotaBytesExceeded)
	// …also taken by a fork.
	_, err = e.svc.ForkSandbox(ctx, e.caller, big.ID, control.ForkRequest{}, "", "")
	wantErrCode(t, "a fork's 2 MiB snapshot", err, errdefs.ClassPayloadTooLarge, errdefs.CodeQuotaBytesExceeded)
	if _, err := e.svc.SnapshotSandbox(ctx, e.caller, small.ID, control.SnapshotRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.SnapshotSandbox(ctx, e.caller, small.ID, control.SnapshotRequest{})
	wantQuota(t, "a third snapshot", err, control.QuotaSnapshots, 2, 2)
	left, _ := os.ReadDir(filepath.Join(e.dir, "snapshots"))
	if len(left) != 2 {
		t.Fatalf("snapshot directories: %d, want the 2 kept", len(left))
	}
	q, _ := e.svc.Quotas(ctx, "main")
	if got := q.Quotas[control.QuotaSnapshots]; got.Usage != 2 {
		t.Fatalf("snapshots: %+v", got)
	}
}

// TestLargeResultInSandbox: run() in a long-lived sandbox answers like a one-call run: a
// result past the cap is a File, a smaller one is in the record alone, and its key's replay
// reads it back.
func TestLargeResultInSandbox(t *testing.T) {
	e := setup3(t, func(c *config.Config) { c.MaxResultBytes = 1024 })
	sb := e.create(t, control.CreateRequest{})
	runIn := func(key, code string) control.RunResult {
		t.Helper()
		resp, err := e.svc.RunIn(ctx, e.caller, sb.ID, control.RunInRequest{RunBody: control.RunBody{Code: code}}, key, "h-"+key)
		if err != nil {
			t.Fatal(err)
		}
		return decodeResult(t, resp)
	}
	r := runIn("big", "def run(input, config):\n    return 'x' * 3000")
	if !r.OK || !isNull(r.Result) || !r.ResultTruncated || r.ResultBytes != 3002 || r.ResultFile == "" {
		t.Fatalf("large: %+v", r)
	}
	if f, err := e.svc.GetFile(ctx, "main", r.ResultFile); err != nil || f.Size != 3002 || f.Origin.Command != r.Command {
		t.Fatalf("its File: %+v %v", f, err)
	}
	small := runIn("small", "def run(input, config):\n    return {'n': 41 + 1}")
	if string(small.Result) != `{"n":42}` {
		t.Fatalf("small: %s", small.Result)
	}
	if k, _ := e.st.GetIdempotency(ctx, "main", "small"); !bytes.Contains(k.ResponseBody, []byte(`"result":null`)) {
		t.Fatalf("the key keeps the result: %s", k.ResponseBody)
	}
	if again := runIn("small", "def run(input, config):\n    return {'n': 41 + 1}"); string(again.Result) != `{"n":42}` {
		t.Fatalf("replay: %s", again.Result)
	}
}
