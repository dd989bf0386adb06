package api_test

import (
	"strings"
	"testing"
)

// The routes of pause, snapshot and fork. The test server's driver is
// controltest.Checkpointing: the local driver with a freezer and a checkpoint that keeps the
// workspace but not memory (memory is tested end to end on gvisor, test/e2e).
const (
	pauseRoute     = "/v1/sandboxes/{id}/pause"
	snapshotRoute  = "/v1/sandboxes/{id}/snapshot"
	snapshotsRoute = "/v1/sandboxes/{id}/snapshots"
	forkRoute      = "/v1/sandboxes/{id}/fork"
	oneSnapshot    = "/v1/snapshots/{id}"
	resumeRoute    = "/v1/sandboxes/{id}/resume"
)

func errCode(t *testing.T, r reply) string {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

// snapshotContract exercises pause, snapshot and fork for every status the document gives
// them but 503. The graph may run one sandbox; a (stopped) is the level 3 test's sandbox and
// is left stopped.
func snapshotContract(t *testing.T, s *server, check checkFunc, admin, reader, other, oneCallSandbox, a string) {
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	const sb = "/v1/sandboxes"
	A, q := sb+"/"+a, "?graph=main"

	// A stopped sandbox neither pauses nor is snapshotted, nor forked without a snapshot.
	check("pauseSandbox", pauseRoute, 409, "POST", A+"/pause"+q, admin, nil, "")
	check("snapshotSandbox", snapshotRoute, 409, "POST", A+"/snapshot"+q, admin, nil, "")
	check("forkSandbox", forkRoute, 409, "POST", A+"/fork"+q, admin, nil, "")
	check("pauseSandbox", pauseRoute, 409, "POST", sb+"/"+oneCallSandbox+"/pause"+q, admin, nil, "")
	check("resumeSandbox", resumeRoute, 200, "POST", A+"/resume"+q, admin, nil, "")

	// Pause with a command running freezes the sandbox, command and all, and resume thaws
	// it; snapshot and fork never break a running command.
	bg := check("execCommand", "/v1/sandboxes/{id}/commands", 202, "POST", A+"/commands"+q, admin, idem("snap-bg"),
		`{"argv": ["sleep", "30"], "wait_ms": 0}`).json(t)
	if r := check("pauseSandbox", pauseRoute, 200, "POST", A+"/pause"+q, admin, nil, "").json(t); r["status"] != "paused" {
		t.Fatalf("pause with a command running: %v", r)
	}
	if r := check("resumeSandbox", resumeRoute, 200, "POST", A+"/resume"+q, admin, nil, "").json(t); r["status"] != "running" {
		t.Fatalf("resume with a command running: %v", r)
	}
	// A snapshot moves running execs to the sandbox's restored life (test/e2e on gvisor: this
	// fake restores no memory); a run(input, config) running, whose stream cannot move, is
	// refused, as is a fork without a snapshot while commands run.
	rn := check("runInSandbox", "/v1/sandboxes/{id}/run", 202, "POST", A+"/run"+q, admin, idem("snap-run"),
		`{"code": "import time\ndef run(input, config):\n    time.sleep(30)", "wait_ms": 0}`).json(t)
	if r := check("snapshotSandbox", snapshotRoute, 409, "POST", A+"/snapshot"+q, admin, nil, ""); errCode(t, r) != "commands_running" {
		t.Fatalf("snapshot with a run running: %s", r.body)
	}
	if r := check("forkSandbox", forkRoute, 409, "POST", A+"/fork"+q, admin, nil, ""); errCode(t, r) != "commands_running" {
		t.Fatalf("fork with a command running: %s", r.body)
	}
	for _, id := range []string{bg["id"].(string), rn["command"].(string)} {
		check("killCommand", "/v1/commands/{id}/kill", 200, "POST", "/v1/commands/"+id+"/kill"+q, admin, nil, "")
		check("getCommand", "/v1/commands/{id}", 200, "GET", "/v1/commands/"+id+q+"&wait_ms=10000", reader, nil, "")
	}

	check("pauseSandbox", pauseRoute, 401, "POST", A+"/pause"+q, "", nil, "")
	check("pauseSandbox", pauseRoute, 403, "POST", A+"/pause"+q, reader, nil, "")
	check("pauseSandbox", pauseRoute, 404, "POST", A+"/pause?graph=other", other, nil, "")
	if r := check("pauseSandbox", pauseRoute, 200, "POST", A+"/pause"+q, admin, nil, "").json(t); r["status"] != "paused" || r["paused_at"] == nil {
		t.Fatalf("pause: %v", r)
	}
	// Pausing a paused sandbox answers it (a retried pause), like stopping a stopped one.
	if r := check("pauseSandbox", pauseRoute, 200, "POST", A+"/pause"+q, admin, nil, "").json(t); r["status"] != "paused" {
		t.Fatalf("pause of a paused sandbox: %v", r)
	}
	check("snapshotSandbox", snapshotRoute, 409, "POST", A+"/snapshot"+q, admin, nil, "")
	check("execCommand", "/v1/sandboxes/{id}/commands", 409, "POST", A+"/commands"+q, admin, idem("snap-paused"), `{"argv": ["true"]}`)
	if r := check("resumeSandbox", resumeRoute, 200, "POST", A+"/resume"+q, admin, nil, "").json(t); r["status"] != "running" || r["paused_at"] != nil {
		t.Fatalf("resume from paused: %v", r)
	}

	// A snapshot; the sandbox runs on.
	check("writeFile", "/v1/sandboxes/{id}/files/content", 200, "PUT", A+"/files/content"+q+"&path=snap/f.txt", admin, nil, "one")
	snap := check("snapshotSandbox", snapshotRoute, 201, "POST", A+"/snapshot"+q, admin, nil, `{"metadata": {"step": "1"}}`).json(t)
	snapID, _ := snap["id"].(string)
	if !strings.HasPrefix(snapID, "snp_") || snap["sandbox"] != a || snap["memory"] != true || snap["metadata"].(map[string]any)["step"] != "1" {
		t.Fatalf("snapshot: %v", snap)
	}
	check("snapshotSandbox", snapshotRoute, 400, "POST", A+"/snapshot"+q, admin, nil, `{"metadata": 5}`)
	check("snapshotSandbox", snapshotRoute, 401, "POST", A+"/snapshot"+q, "", nil, "")
	check("snapshotSandbox", snapshotRoute, 403, "POST", A+"/snapshot"+q, reader, nil, "")
	check("snapshotSandbox", snapshotRoute, 404, "POST", A+"/snapshot?graph=other", other, nil, "")
	if r := check("execCommand", "/v1/sandboxes/{id}/commands", 200, "POST", A+"/commands"+q, admin, idem("snap-after"),
		`{"argv": ["cat", "snap/f.txt"], "wait_ms": 30000}`).json(t); r["stdout"].(map[string]any)["tail"] != "one" {
		t.Fatalf("after a snapshot: %v", r)
	}
	// Under an Idempotency-Key a retry answers the snapshot the first call took; the key with
	// another request is 422.
	keyed := check("snapshotSandbox", snapshotRoute, 201, "POST", A+"/snapshot"+q, admin, idem("snap-k"), `{"metadata": {"k": "1"}}`)
	again := check("snapshotSandbox", snapshotRoute, 201, "POST", A+"/snapshot"+q, admin, idem("snap-k"), `{"metadata": {"k": "1"}}`)
	if again.header.Get("Idempotent-Replayed") != "true" || again.json(t)["id"] != keyed.json(t)["id"] {
		t.Fatalf("a keyed snapshot retried: %s, then %v %s", keyed.body, again.header, again.body)
	}
	check("snapshotSandbox", snapshotRoute, 422, "POST", A+"/snapshot"+q, admin, idem("snap-k"), `{"metadata": {"k": "2"}}`)
	check("deleteSnapshot", oneSnapshot, 200, "DELETE", "/v1/snapshots/"+keyed.json(t)["id"].(string)+q, admin, nil, "")
	second := check("snapshotSandbox", snapshotRoute, 201, "POST", A+"/snapshot"+q, admin, nil, "").json(t)
	if md, ok := second["metadata"].(map[string]any); !ok || len(md) != 0 {
		t.Fatalf("a snapshot without metadata: %v", second)
	}

	l := check("listSnapshots", snapshotsRoute, 200, "GET", A+"/snapshots"+q+"&limit=1", reader, nil, "").json(t)
	if ss := l["snapshots"].([]any); len(ss) != 1 || ss[0].(map[string]any)["id"] != second["id"] || l["next_cursor"] != second["id"] {
		t.Fatalf("snapshots page 1: %v", l)
	}
	l = check("listSnapshots", snapshotsRoute, 200, "GET", A+"/snapshots"+q+"&cursor="+l["next_cursor"].(string), reader, nil, "").json(t)
	if ss := l["snapshots"].([]any); len(ss) != 1 || ss[0].(map[string]any)["id"] != snapID {
		t.Fatalf("snapshots page 2: %v", l)
	}
	check("listSnapshots", snapshotsRoute, 400, "GET", A+"/snapshots"+q+"&limit=0", reader, nil, "")
	check("listSnapshots", snapshotsRoute, 401, "GET", A+"/snapshots"+q, "", nil, "")
	check("listSnapshots", snapshotsRoute, 404, "GET", A+"/snapshots?graph=other", other, nil, "")
	check("getSnapshot", oneSnapshot, 200, "GET", "/v1/snapshots/"+snapID+q, reader, nil, "")
	check("getSnapshot", oneSnapshot, 401, "GET", "/v1/snapshots/"+snapID+q, "", nil, "")
	check("getSnapshot", oneSnapshot, 404, "GET", "/v1/snapshots/"+snapID+"?graph=other", other, nil, "")

	// Forks: A runs, and the graph may run one sandbox.
	forkBody := `{"snapshot": "` + snapID + `", "metadata": {"team": "b"}, "env": {"TOKEN": "fork-secret"}}`
	check("forkSandbox", forkRoute, 429, "POST", A+"/fork"+q, admin, idem("fork-1"), forkBody)
	check("forkSandbox", forkRoute, 400, "POST", A+"/fork"+q, admin, nil, `{"colour": 1}`)
	check("forkSandbox", forkRoute, 400, "POST", A+"/fork"+q, admin, nil, `{"expires_in_seconds": -1}`)
	check("forkSandbox", forkRoute, 401, "POST", A+"/fork"+q, "", nil, forkBody)
	check("forkSandbox", forkRoute, 403, "POST", A+"/fork"+q, reader, nil, forkBody)
	check("forkSandbox", forkRoute, 404, "POST", A+"/fork?graph=other", other, nil, forkBody)
	check("forkSandbox", forkRoute, 404, "POST", A+"/fork"+q, admin, nil, `{"snapshot": "snp_nope"}`)
	check("pauseSandbox", pauseRoute, 200, "POST", A+"/pause"+q, admin, nil, "") // a paused sandbox does not count
	fork := check("forkSandbox", forkRoute, 201, "POST", A+"/fork"+q, admin, idem("fork-1"), forkBody)
	f := fork.json(t)
	F := sb + "/" + f["id"].(string)
	if ff, _ := f["forked_from"].(map[string]any); f["status"] != "running" || ff["sandbox"] != a || ff["snapshot"] != snapID ||
		f["metadata"].(map[string]any)["team"] != "b" || f["id"] == a {
		t.Fatalf("fork: %v", f)
	}
	if r := check("forkSandbox", forkRoute, 201, "POST", A+"/fork"+q, admin, idem("fork-1"), forkBody); r.json(t)["id"] != f["id"] ||
		r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("fork replay: %s %v", r.body, r.header)
	}
	check("forkSandbox", forkRoute, 422, "POST", A+"/fork"+q, admin, idem("fork-1"), `{"snapshot": "`+snapID+`"}`)
	if got := check("readFile", "/v1/sandboxes/{id}/files/content", 200, "GET", F+"/files/content"+q+"&path=snap/f.txt", reader, nil, ""); string(got.body) != "one" {
		t.Fatalf("the fork's workspace: %q", got.body)
	}
	if r := check("execCommand", "/v1/sandboxes/{id}/commands", 200, "POST", F+"/commands"+q, admin, idem("fork-env"),
		`{"argv": ["sh", "-c", "echo $TOKEN"], "wait_ms": 30000}`).json(t); r["stdout"].(map[string]any)["tail"] != "***\n" {
		t.Fatalf("the fork's env, masked: %v", r)
	}

	// Deleting a snapshot leaves its forks running.
	check("deleteSnapshot", oneSnapshot, 401, "DELETE", "/v1/snapshots/"+snapID+q, "", nil, "")
	check("deleteSnapshot", oneSnapshot, 403, "DELETE", "/v1/snapshots/"+snapID+q, reader, nil, "")
	check("deleteSnapshot", oneSnapshot, 404, "DELETE", "/v1/snapshots/"+snapID+"?graph=other", other, nil, "")
	if r := check("deleteSnapshot", oneSnapshot, 200, "DELETE", "/v1/snapshots/"+snapID+q, admin, nil, "").json(t); r["id"] != snapID {
		t.Fatalf("delete snapshot: %v", r)
	}
	check("getSnapshot", oneSnapshot, 404, "GET", "/v1/snapshots/"+snapID+q, reader, nil, "")
	check("deleteSnapshot", oneSnapshot, 404, "DELETE", "/v1/snapshots/"+snapID+q, admin, nil, "")
	check("execCommand", "/v1/sandboxes/{id}/commands", 200, "POST", F+"/commands"+q, admin, idem("fork-alive"), `{"argv": ["true"], "wait_ms": 30000}`)
	check("deleteSandbox", sb+"/{id}", 200, "DELETE", F+q, admin, nil, "")

	// A's snapshots go with it; here it stops, keeping them.
	check("resumeSandbox", resumeRoute, 200, "POST", A+"/resume"+q, admin, nil, "")
	check("stopSandbox", "/v1/sandboxes/{id}/stop", 200, "POST", A+"/stop"+q, admin, nil, "")
	if l := check("listSnapshots", snapshotsRoute, 200, "GET", A+"/snapshots"+q, reader, nil, "").json(t); len(l["snapshots"].([]any)) != 1 {
		t.Fatalf("a stopped sandbox's snapshots: %v", l)
	}
}

// snapshotsAfterShutdown: a server that is shutting down pauses, snapshots and forks nothing.
func snapshotsAfterShutdown(t *testing.T, check checkFunc, admin, a string) {
	A, q := "/v1/sandboxes/"+a, "?graph=main"
	check("pauseSandbox", pauseRoute, 503, "POST", A+"/pause"+q, admin, nil, "")
	check("snapshotSandbox", snapshotRoute, 503, "POST", A+"/snapshot"+q, admin, nil, "")
	check("forkSandbox", forkRoute, 503, "POST", A+"/fork"+q, admin, nil, "")
}
