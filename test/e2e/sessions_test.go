//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/littlebigbrain/lbb/internal/blobs/s3test"
)

// TestSessionsResumeAnywhere: a session's sandbox, on ns and on gvisor, with its Files and
// workspace archives in a bucket (SeaweedFS on loopback). POST /v1/sandboxes with the session
// creates it (201), answers it running (200), and after a stop resumes it: its workspace
// comes back from the archive when the host's copy of its disk is gone (as on another host),
// and from the host's copy when that is the archive's. Named sizes set limits, explicit limits
// override them, and the 400s and 409s have their codes.
func TestSessionsResumeAnywhere(t *testing.T) {
	requireEnv(t)
	s3 := s3test.Start(t)
	bucket := s3.NewBucket(t)
	for k, v := range s3test.Env {
		t.Setenv(k, v)
	}
	u, _ := url.Parse(bucket)
	s := startServer(t, "--pool-min", "0", "--pool-gvisor-min", "0", "--blobs", bucket)
	q := "?graph=main"
	call := func(method, path, body string) reply {
		t.Helper()
		return s.call(method, path+q, "", nil, body)
	}
	exec := func(sb, line string) string {
		t.Helper()
		r := s.call("POST", "/v1/sandboxes/"+sb+"/commands"+q, "", map[string]string{"Idempotency-Key": fmt.Sprintf("x-%d", time.Now().UnixNano())},
			jsonBody(t, map[string]any{"argv": []string{"bash", "-c", line}, "wait_ms": 120000}))
		m := r.obj(t)
		if r.status != 200 || m["status"] != "succeeded" {
			t.Fatalf("%s: %d %s", line, r.status, r.body)
		}
		return m["stdout"].(map[string]any)["tail"].(string)
	}
	archived := func(sha string) bool {
		_, err := s3.Client().StatObject(context.Background(), u.Host, "sha256/"+sha, minio.StatObjectOptions{})
		return err == nil
	}

	// The bucket's first write makes SeaweedFS grow its volumes (seconds): a File takes that,
	// so that the figures below are the archives'.
	if r := call("POST", "/v1/files", "warm-up"); r.status != 201 {
		t.Fatalf("a File: %d %s", r.status, r.body)
	}

	// Sizes: presets, aliases, explicit limits over them, unknown ones.
	if r := call("POST", "/v1/sandboxes", `{"size": "xlarge"}`); r.status != 400 || r.errCode(t) != "unknown_size" {
		t.Fatalf("an unknown size: %d %s", r.status, r.body)
	}
	if r := call("POST", "/v1/sandboxes", `{"session": "../x"}`); r.status != 400 {
		t.Fatalf("an invalid session name: %d %s", r.status, r.body)
	}
	sized := call("POST", "/v1/sandboxes", `{"size": "small", "limits": {"memory_mib": 768}}`).obj(t)
	if l := sized["limits"].(map[string]any); sized["size"] != "standard-2" || l["cpus"] != 1.0 || l["memory_mib"] != 768.0 || l["disk_mib"] != 4096.0 {
		t.Fatalf("small with memory_mib 768: %v", sized)
	}
	call("DELETE", "/v1/sandboxes/"+sized["id"].(string), "")

	restored := 0
	for _, iso := range []string{"ns", "gvisor"} {
		t.Run(iso, func(t *testing.T) {
			if iso == "gvisor" {
				if _, why := runsc(); why != "" {
					t.Skip(why) // TestIsolation fails for it under LBB_REQUIRE_PRIVILEGED
				}
			}
			session := "work-" + iso
			body := jsonBody(t, map[string]any{"session": session, "isolation": iso, "size": "standard-1"})
			r := call("POST", "/v1/sandboxes", body)
			sb := r.obj(t)
			if r.status != 201 || sb["session"] != session || sb["size"] != "standard-1" || sb["isolation"] != iso {
				t.Fatalf("create: %d %s", r.status, r.body)
			}
			id := sb["id"].(string)
			if l := sb["limits"].(map[string]any); l["cpus"] != 1.0 || l["memory_mib"] != 1024.0 || l["disk_mib"] != 2048.0 {
				t.Fatalf("standard-1's limits: %v", l)
			}
			// Again: the same sandbox, running; another size is another sandbox.
			if r := call("POST", "/v1/sandboxes", body); r.status != 200 || r.obj(t)["id"] != id {
				t.Fatalf("the session again: %d %s", r.status, r.body)
			}
			if r := call("POST", "/v1/sandboxes", jsonBody(t, map[string]any{"session": session, "size": "large"})); r.status != 409 || r.errCode(t) != "session_mismatch" {
				t.Fatalf("the session with another size: %d %s", r.status, r.body)
			}
			want := exec(id, "echo hello-"+iso+" > notes.txt && mkdir -p d && head -c 3000000 /dev/urandom > d/blob && sha256sum d/blob")

			t0 := time.Now()
			stopped := call("POST", "/v1/sandboxes/"+id+"/stop", "").obj(t)
			stopTook := time.Since(t0)
			ws, _ := stopped["workspace"].(map[string]any)
			if stopped["status"] != "stopped" || ws == nil {
				t.Fatalf("stop: no workspace archive: %v", stopped)
			}
			sha := ws["sha256"].(string)
			if b := ws["bytes"].(float64); b < 3e6 || b > 40e6 || ws["disk_bytes"] != 2048.0*(1<<20) || !archived(sha) {
				t.Fatalf("the archive: %v (in the bucket: %v)", ws, archived(sha))
			}
			// The host's copy of the disk goes, as if the session resumed on another host.
			state := filepath.Join(s.dataDir, map[string]string{"ns": "sandboxes", "gvisor": "gvisor"}[iso], id)
			if _, err := os.Stat(filepath.Join(state, "disk.img")); err != nil {
				t.Fatalf("the sandbox's disk is not where the test looks: %v", err)
			}
			if err := os.RemoveAll(state); err != nil {
				t.Fatal(err)
			}
			t0 = time.Now()
			r = call("POST", "/v1/sandboxes", jsonBody(t, map[string]any{"session": session}))
			if m := r.obj(t); r.status != 200 || m["id"] != id || m["status"] != "running" || m["workspace"] != nil {
				t.Fatalf("resume from the archive: %d %s", r.status, r.body)
			}
			t.Logf("FIGURES %s: a stop that archives 3 MB of workspace (a %.1f MB archive) %s; a resume that restores it %s",
				iso, ws["bytes"].(float64)/1e6, stopTook.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
			restored++
			if got := exec(id, "cat notes.txt && sha256sum d/blob"); got != "hello-"+iso+"\n"+want {
				t.Fatalf("after the restore: %q, want %q", got, "hello-"+iso+"\n"+want)
			}
			if archived(sha) {
				t.Fatal("the archive outlived the resume that made it stale")
			}

			// Stopped and resumed on the same host: its own copy serves.
			exec(id, "echo again >> notes.txt")
			sha2 := call("POST", "/v1/sandboxes/"+id+"/stop", "").obj(t)["workspace"].(map[string]any)["sha256"].(string)
			if r := call("POST", "/v1/sandboxes", jsonBody(t, map[string]any{"session": session})); r.status != 200 {
				t.Fatalf("resume: %d %s", r.status, r.body)
			}
			if got := exec(id, "cat notes.txt"); got != "hello-"+iso+"\nagain\n" {
				t.Fatalf("after a local resume: %q", got)
			}
			if n := restores(s.stderr.String(), id); n != 1 {
				t.Errorf("the workspace was restored %d times, want once (the second resume had the host's copy)", n)
			}
			if archived(sha2) {
				t.Error("the archive outlived the resume that made it stale")
			}
			// Deleted: its archive goes, the name is free, the next call starts a fresh workspace.
			sha3 := call("POST", "/v1/sandboxes/"+id+"/stop", "").obj(t)["workspace"].(map[string]any)["sha256"].(string)
			call("DELETE", "/v1/sandboxes/"+id, "")
			if archived(sha3) {
				t.Error("a deleted sandbox's archive is still in the bucket")
			}
			r = call("POST", "/v1/sandboxes", jsonBody(t, map[string]any{"session": session}))
			fresh := r.obj(t)
			if r.status != 201 || fresh["id"] == id {
				t.Fatalf("the session after its sandbox was deleted: %d %s", r.status, r.body)
			}
			if got := exec(fresh["id"].(string), "ls"); strings.Contains(got, "notes.txt") {
				t.Fatalf("a fresh session's workspace holds the old one's files: %q", got)
			}
			call("DELETE", "/v1/sandboxes/"+fresh["id"].(string), "")
		})
	}
	if restored == 0 {
		t.Fatal("no workspace was restored")
	}

	// A server that shuts down archives the workspaces it stops: the session resumes after,
	// also where the host's copy is gone.
	r := call("POST", "/v1/sandboxes", `{"session": "drain"}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := r.obj(t)["id"].(string)
	exec(id, "echo kept > kept.txt")
	s.stop()
	s.start()
	sb := call("GET", "/v1/sandboxes/"+id, "").obj(t)
	if sb["status"] != "stopped" || sb["end_reason"] != "server_shutdown" || sb["workspace"] == nil {
		t.Fatalf("after a shutdown: %v", sb)
	}
	if err := os.RemoveAll(filepath.Join(s.dataDir, "sandboxes", id)); err != nil {
		t.Fatal(err)
	}
	if r := call("POST", "/v1/sandboxes", `{"session": "drain"}`); r.status != 200 || r.obj(t)["id"] != id {
		t.Fatalf("resume after a shutdown: %d %s", r.status, r.body)
	}
	if got := exec(id, "cat kept.txt"); got != "kept\n" {
		t.Fatalf("after a shutdown and a restore: %q", got)
	}
}

// restores counts the log lines of workspaces restored for sandbox id.
func restores(log, id string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "workspace restored" && m["sandbox"] == id {
			n++
		}
	}
	return n
}
