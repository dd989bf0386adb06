package api_test

import (
	"strings"
	"testing"

	"github.com/littlebigbrain/lbb/internal/blobs"
)

type checkFunc func(op, pattern string, want int, method, path, key string, hdr map[string]string, body string) reply

// level3Contract exercises the Level 3 routes for every status the document gives them. The
// server caps a graph at one running sandbox, its bodies and files at 4 KiB. It answers a
// stopped sandbox.
func level3Contract(t *testing.T, s *server, check checkFunc, admin, reader, other, oneCallSandbox string) string {
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	const sb = "/v1/sandboxes"
	created := check("createSandbox", sb, 201, "POST", sb+"?graph=main", admin, idem("l3-a"),
		`{"expires_in_seconds": 600, "env": {"TOKEN": "s3cr3t-value"}, "metadata": {"team": "a"}}`).json(t)
	a := created["id"].(string)
	if r := check("createSandbox", sb, 201, "POST", sb+"?graph=main", admin, idem("l3-a"),
		`{"metadata": {"team": "a"}, "expires_in_seconds": 600, "env": {"TOKEN": "s3cr3t-value"}}`); r.json(t)["id"] != a || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("create replay: %s %v", r.body, r.header)
	}
	A := sb + "/" + a
	q := "?graph=main"

	const fc = "/v1/sandboxes/{id}/files/content"
	check("writeFile", fc, 200, "PUT", A+"/files/content"+q+"&path=dir/a.txt", admin, nil, "hello")
	check("writeFile", fc, 400, "PUT", A+"/files/content"+q+"&path=../x", admin, nil, "x")
	check("writeFile", fc, 401, "PUT", A+"/files/content"+q+"&path=x", "", nil, "x")
	check("writeFile", fc, 403, "PUT", A+"/files/content"+q+"&path=x", reader, nil, "x")
	check("writeFile", fc, 404, "PUT", sb+"/sbx_nope/files/content"+q+"&path=x", admin, nil, "x")
	check("writeFile", fc, 413, "PUT", A+"/files/content"+q+"&path=big", admin, nil, strings.Repeat("x", 5000))
	if got := check("readFile", fc, 200, "GET", A+"/files/content"+q+"&path=dir/a.txt", reader, nil, ""); string(got.body) != "hello" ||
		got.header.Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(got.header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("read: %v %q", got.header, got.body)
	}
	check("readFile", fc, 400, "GET", A+"/files/content"+q+"&path=/etc/passwd", reader, nil, "")
	check("readFile", fc, 401, "GET", A+"/files/content"+q+"&path=dir/a.txt", "", nil, "")
	check("readFile", fc, 404, "GET", A+"/files/content?graph=other&path=dir/a.txt", other, nil, "")

	const fl = "/v1/sandboxes/{id}/files"
	if l := check("listFiles", fl, 200, "GET", A+"/files"+q+"&recursive=true", reader, nil, "").json(t); len(l["data"].([]any)) != 2 {
		t.Fatalf("list: %v", l)
	}
	check("listFiles", fl, 400, "GET", A+"/files"+q+"&recursive=maybe", reader, nil, "")
	check("listFiles", fl, 401, "GET", A+"/files"+q, "", nil, "")
	check("listFiles", fl, 404, "GET", A+"/files?graph=other", other, nil, "")
	const md = "/v1/sandboxes/{id}/files/mkdir"
	check("makeDir", md, 200, "POST", A+"/files/mkdir"+q+"&path=d1/d2", admin, nil, "")
	check("makeDir", md, 400, "POST", A+"/files/mkdir"+q, admin, nil, "")
	check("makeDir", md, 401, "POST", A+"/files/mkdir"+q+"&path=d", "", nil, "")
	check("makeDir", md, 403, "POST", A+"/files/mkdir"+q+"&path=d", reader, nil, "")
	check("makeDir", md, 404, "POST", sb+"/sbx_nope/files/mkdir"+q+"&path=d", admin, nil, "")
	check("removeFile", fl, 204, "DELETE", A+"/files"+q+"&path=d1&recursive=true", admin, nil, "")
	check("removeFile", fl, 400, "DELETE", A+"/files"+q+"&path=/etc", admin, nil, "")
	check("removeFile", fl, 401, "DELETE", A+"/files"+q+"&path=x", "", nil, "")
	check("removeFile", fl, 403, "DELETE", A+"/files"+q+"&path=x", reader, nil, "")
	check("removeFile", fl, 404, "DELETE", A+"/files"+q+"&path=no-such-file", admin, nil, "")

	const sc = "/v1/sandboxes/{id}/commands"
	ran := check("execCommand", sc, 200, "POST", A+"/commands"+q, admin, idem("l3-c1"), `{"argv": ["sh", "-c", "echo $TOKEN; echo err >&2"], "wait_ms": 30000}`).json(t)
	if out := ran["stdout"].(map[string]any)["tail"]; out != "***\n" || ran["status"] != "succeeded" {
		t.Fatalf("exec: the env value is not masked, or it failed: %v", ran)
	}
	// Asked for a stream, the start answers the record, the output from its first byte (masked),
	// then the exit; "stream": true in the body asks the same.
	for i, hdr := range []map[string]string{{"Idempotency-Key": "l3-s1", "Accept": "text/event-stream"}, idem("l3-s2")} {
		body := `{"argv": ["sh", "-c", "echo $TOKEN; echo err >&2"]` + []string{"}", `, "stream": true}`}[i]
		r := check("execCommand", sc, 200, "POST", A+"/commands"+q, admin, hdr, body)
		if b := string(r.body); !strings.HasPrefix(b, "event: command\ndata: {") || !strings.Contains(b, `{"stream":"stdout","offset":0,"data":"***\n"}`) ||
			!strings.Contains(b, `{"stream":"stderr","offset":0,"data":"err\n"}`) || !strings.Contains(b, "event: exit\ndata: {") ||
			strings.Contains(b, "s3cr3t") || r.header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("a streamed exec: %v %s", r.header, b)
		}
	}
	bg := check("execCommand", sc, 202, "POST", A+"/commands"+q, admin, idem("l3-c2"), `{"argv": ["sleep", "30"], "wait_ms": 0}`).json(t)
	check("execCommand", sc, 400, "POST", A+"/commands"+q, admin, nil, `{"argv": ["true"]}`)
	check("execCommand", sc, 401, "POST", A+"/commands"+q, "", idem("l3-x"), `{"argv": ["true"]}`)
	check("execCommand", sc, 403, "POST", A+"/commands"+q, reader, idem("l3-x"), `{"argv": ["true"]}`)
	check("execCommand", sc, 404, "POST", sb+"/sbx_nope/commands"+q, admin, idem("l3-x"), `{"argv": ["true"]}`)
	check("execCommand", sc, 413, "POST", A+"/commands"+q, admin, idem("l3-x"), `{"argv": ["cat"], "stdin": "`+strings.Repeat("x", 5000)+`"}`)
	check("execCommand", sc, 422, "POST", A+"/commands"+q, admin, idem("l3-c1"), `{"argv": ["true"]}`)

	const rn = "/v1/sandboxes/{id}/run"
	runBody := `{"code": "def run(input, config):\n    return open('dir/a.txt').read() + input", "input": "!"}`
	if r := check("runInSandbox", rn, 200, "POST", A+"/run"+q, admin, idem("l3-r1"), runBody).json(t); r["result"] != "hello!" {
		t.Fatalf("run in a sandbox: %v", r)
	}
	slow := check("runInSandbox", rn, 202, "POST", A+"/run"+q, admin, idem("l3-r2"),
		`{"code": "import time\ndef run(input, config):\n    time.sleep(0.3)\n    return 1", "wait_ms": 0}`).json(t)
	check("runInSandbox", rn, 400, "POST", A+"/run"+q, admin, nil, runBody)
	check("runInSandbox", rn, 401, "POST", A+"/run"+q, "", idem("l3-x"), runBody)
	check("runInSandbox", rn, 403, "POST", A+"/run"+q, reader, idem("l3-x"), runBody)
	check("runInSandbox", rn, 404, "POST", sb+"/sbx_nope/run"+q, admin, idem("l3-x"), runBody)
	check("runInSandbox", rn, 413, "POST", A+"/run"+q, admin, idem("l3-x"), `{"code": "`+strings.Repeat("x", 5000)+`"}`)
	check("runInSandbox", rn, 422, "POST", A+"/run"+q, admin, idem("l3-r1"), `{"code": "x"}`)
	check("getCommand", "/v1/commands/{id}", 200, "GET", "/v1/commands/"+slow["command"].(string)+q+"&wait_ms=10000", reader, nil, "")

	const co = "/v1/commands/{id}/output"
	out := check("commandOutput", co, 200, "GET", "/v1/commands/"+ran["id"].(string)+"/output"+q+"&follow=true", reader, nil, "")
	if b := string(out.body); !strings.Contains(b, "event: stdout") || !strings.Contains(b, `"data":"***\n"`) || !strings.Contains(b, "event: exit") {
		t.Fatalf("output: %s", b)
	}
	check("commandOutput", co, 400, "GET", "/v1/commands/"+ran["id"].(string)+"/output"+q+"&stream=stdin", reader, nil, "")
	check("commandOutput", co, 401, "GET", "/v1/commands/"+ran["id"].(string)+"/output"+q, "", nil, "")
	check("commandOutput", co, 404, "GET", "/v1/commands/cmd_nope/output"+q, reader, nil, "")

	const ki = "/v1/commands/{id}/kill"
	bgID := bg["id"].(string)
	check("killCommand", ki, 400, "POST", "/v1/commands/"+bgID+"/kill"+q, admin, nil, `{"signal": "SIGNOPE"}`)
	if k := check("killCommand", ki, 200, "POST", "/v1/commands/"+bgID+"/kill"+q, admin, nil, `{"signal": "TERM"}`).json(t); k["status"] != "killed" {
		t.Fatalf("kill: %v", k)
	}
	check("killCommand", ki, 401, "POST", "/v1/commands/"+bgID+"/kill"+q, "", nil, "")
	check("killCommand", ki, 403, "POST", "/v1/commands/"+bgID+"/kill"+q, reader, nil, "")
	check("killCommand", ki, 404, "POST", "/v1/commands/cmd_nope/kill"+q, admin, nil, "")

	const si = "/v1/commands/{id}/stdin"
	cat := check("execCommand", sc, 202, "POST", A+"/commands"+q, admin, idem("l3-c3"), `{"argv": ["cat"], "stdin": "a", "stdin_open": true, "wait_ms": 0}`).json(t)
	catID := cat["id"].(string)
	check("commandStdin", si, 200, "POST", "/v1/commands/"+catID+"/stdin"+q, admin, nil, "b")
	check("commandStdin", si, 400, "POST", "/v1/commands/"+catID+"/stdin"+q+"&close=soon", admin, nil, "c")
	check("commandStdin", si, 401, "POST", "/v1/commands/"+catID+"/stdin"+q, "", nil, "c")
	check("commandStdin", si, 403, "POST", "/v1/commands/"+catID+"/stdin"+q, reader, nil, "c")
	check("commandStdin", si, 404, "POST", "/v1/commands/cmd_nope/stdin"+q, admin, nil, "c")
	check("commandStdin", si, 413, "POST", "/v1/commands/"+catID+"/stdin"+q, admin, nil, strings.Repeat("x", 5000))
	check("commandStdin", si, 200, "POST", "/v1/commands/"+catID+"/stdin"+q+"&close=true", admin, nil, "c")
	if c := check("getCommand", "/v1/commands/{id}", 200, "GET", "/v1/commands/"+catID+q+"&wait_ms=10000", reader, nil, "").json(t); c["status"] != "succeeded" ||
		!strings.HasPrefix(c["stdout"].(map[string]any)["head"].(string)+c["stdout"].(map[string]any)["tail"].(string), "ab") {
		t.Fatalf("stdin: %v", c)
	}
	check("commandStdin", si, 409, "POST", "/v1/commands/"+ran["id"].(string)+"/stdin"+q, admin, nil, "c")

	const gf = "/v1/files"
	kept := check("createFile", gf, 201, "POST", gf+q+"&source_sandbox="+a+"&source_path=dir/a.txt", admin, idem("l3-k1"), "").json(t)
	if kept["sha256"] != blobs.Digest([]byte("hello")) || kept["origin"].(map[string]any)["sandbox"] != a {
		t.Fatalf("keep: %v", kept)
	}
	up := check("createFile", gf, 201, "POST", gf+q+"&name=up.txt", admin, idem("l3-u1"), "uploaded").json(t)
	check("createFile", gf, 400, "POST", gf+q+"&name=a/b", admin, nil, "x")
	check("createFile", gf, 401, "POST", gf+q+"&name=x", "", nil, "x")
	check("createFile", gf, 403, "POST", gf+q+"&name=x", reader, nil, "x")
	check("createFile", gf, 404, "POST", gf+q+"&source_sandbox=sbx_nope&source_path=x", admin, nil, "")
	check("createFile", gf, 413, "POST", gf+q+"&name=big", admin, nil, strings.Repeat("x", 5000))
	check("createFile", gf, 422, "POST", gf+q+"&source_sandbox="+a+"&source_path=other.txt", admin, idem("l3-k1"), "")
	check("listGraphFiles", gf, 200, "GET", gf+q+"&limit=1", admin, nil, "")
	check("listGraphFiles", gf, 400, "GET", gf+q+"&limit=0", admin, nil, "")
	check("listGraphFiles", gf, 401, "GET", gf+q, "", nil, "")
	check("listGraphFiles", gf, 403, "GET", gf+q, reader, nil, "")
	check("listGraphFiles", gf, 404, "GET", gf+"?graph=nope", admin, nil, "")
	fid := kept["id"].(string)
	check("getGraphFile", gf+"/{id}", 200, "GET", gf+"/"+fid+q, admin, nil, "")
	check("getGraphFile", gf+"/{id}", 401, "GET", gf+"/"+fid+q, "", nil, "")
	check("getGraphFile", gf+"/{id}", 403, "GET", gf+"/"+fid+q, reader, nil, "")
	check("getGraphFile", gf+"/{id}", 404, "GET", gf+"/"+fid+"?graph=other", other, nil, "")
	if c := check("graphFileContent", gf+"/{id}/content", 200, "GET", gf+"/"+up["id"].(string)+"/content"+q, admin, nil, ""); string(c.body) != "uploaded" {
		t.Fatalf("content: %q", c.body)
	}
	check("graphFileContent", gf+"/{id}/content", 401, "GET", gf+"/"+fid+"/content"+q, "", nil, "")
	check("graphFileContent", gf+"/{id}/content", 403, "GET", gf+"/"+fid+"/content"+q, reader, nil, "")
	check("graphFileContent", gf+"/{id}/content", 404, "GET", gf+"/"+fid+"/content?graph=other", other, nil, "")
	// A File a template version names stays; another goes, with its blob.
	check("createTemplate", "/v1/sandboxes/templates", 201, "POST", "/v1/sandboxes/templates"+q, admin, nil,
		`{"name": "reads-kept", "code": "def run(i, c): return i", "files": [{"file": "`+fid+`", "path": "k.txt"}]}`)
	const gd = gf + "/{id}"
	upID := up["id"].(string)
	check("deleteGraphFile", gd, 409, "DELETE", gf+"/"+fid+q, admin, nil, "")
	check("deleteGraphFile", gd, 401, "DELETE", gf+"/"+upID+q, "", nil, "")
	check("deleteGraphFile", gd, 403, "DELETE", gf+"/"+upID+q, reader, nil, "")
	check("deleteGraphFile", gd, 404, "DELETE", gf+"/"+upID+"?graph=other", other, nil, "")
	if r := check("deleteGraphFile", gd, 200, "DELETE", gf+"/"+upID+q, admin, nil, "").json(t); r["id"] != upID {
		t.Fatalf("delete: %v", r)
	}
	check("deleteGraphFile", gd, 404, "DELETE", gf+"/"+upID+q, admin, nil, "")
	check("graphFileContent", gf+"/{id}/content", 404, "GET", gf+"/"+upID+"/content"+q, admin, nil, "")
	quotas := check("getQuotas", "/v1/quotas", 200, "GET", "/v1/quotas"+q, reader, nil, "").json(t)
	if f := quotas["quotas"].(map[string]any)["files"].(map[string]any); f["usage"] != 1.0 || f["limit"] != 10000.0 {
		t.Fatalf("quotas: %v", quotas)
	}
	check("getQuotas", "/v1/quotas", 401, "GET", "/v1/quotas"+q, "", nil, "")
	check("getQuotas", "/v1/quotas", 404, "GET", "/v1/quotas"+q, other, nil, "")

	const im = "/v1/sandboxes/files/content"
	imq := im + q + "&sandbox=" + a + "&path=imported/a.txt&source_sha256="
	sha := kept["sha256"].(string)
	if r := check("importFile", im, 200, "PUT", imq+sha, admin, idem("l3-i1"), "").json(t); r["sha256"] != sha || r["size"] != 5.0 {
		t.Fatalf("import: %v", r)
	}
	check("importFile", im, 400, "PUT", imq+"not-a-digest", admin, nil, "")
	check("importFile", im, 401, "PUT", imq+sha, "", nil, "")
	check("importFile", im, 403, "PUT", imq+sha, reader, nil, "")
	check("importFile", im, 404, "PUT", imq+blobs.Digest([]byte("nobody has these bytes")), admin, nil, "")
	check("importFile", im, 404, "PUT", im+"?graph=other&sandbox="+a+"&path=x&source_sha256="+sha, other, nil, "")
	check("importFile", im, 422, "PUT", im+q+"&sandbox="+a+"&path=elsewhere&source_sha256="+sha, admin, idem("l3-i1"), "")

	// A terminal over a WebSocket (pty_test.go drives one): a handshake by hand, for a
	// terminal that ends at once, so that the answer ends.
	const pt = "/v1/sandboxes/{id}/pty"
	upgrade := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	if r := check("sandboxPty", pt, 101, "GET", A+"/pty"+q+"&argv=echo&argv=hi", admin, upgrade, ""); !strings.Contains(string(r.body), `"type":"exit"`) {
		t.Fatalf("pty: %q", r.body)
	}
	check("sandboxPty", pt, 400, "GET", A+"/pty"+q+"&cols=wide", admin, upgrade, "")
	check("sandboxPty", pt, 401, "GET", A+"/pty"+q, "", upgrade, "")
	check("sandboxPty", pt, 403, "GET", A+"/pty"+q, reader, upgrade, "")
	check("sandboxPty", pt, 404, "GET", sb+"/sbx_nope/pty"+q, admin, upgrade, "")
	check("sandboxPty", pt, 404, "GET", A+"/pty"+q+"&terminal="+bg["id"].(string), admin, upgrade, "")

	// Preview URLs (the preview listener itself: test/e2e). No listener: 503.
	const pu = "/v1/sandboxes/{id}/ports/{port}/url"
	check("previewURL", pu, 503, "POST", A+"/ports/8000/url"+q, admin, nil, "")
	s.svc.SetPreviewListener("http", "7701")
	if r := check("previewURL", pu, 200, "POST", A+"/ports/8000/url"+q, admin, nil, `{"expires_in_seconds": 60}`).json(t); !strings.HasPrefix(r["url"].(string), "http://p8000-") {
		t.Fatalf("preview: %v", r)
	}
	check("previewURL", pu, 400, "POST", A+"/ports/0/url"+q, admin, nil, "")
	check("previewURL", pu, 400, "POST", A+"/ports/80/url"+q, admin, nil, `{"expires_in_seconds": 99999999}`)
	check("previewURL", pu, 401, "POST", A+"/ports/80/url"+q, "", nil, "")
	check("previewURL", pu, 403, "POST", A+"/ports/80/url"+q, reader, nil, "")
	check("previewURL", pu, 404, "POST", A+"/ports/80/url?graph=other", other, nil, "")
	const pl, pd = "/v1/sandboxes/{id}/previews", "/v1/sandboxes/{id}/previews/{preview}"
	previews := check("listPreviews", pl, 200, "GET", A+"/previews"+q, reader, nil, "").json(t)["data"].([]any)
	if len(previews) != 1 || previews[0].(map[string]any)["url"] != nil {
		t.Fatalf("previews (their URLs are not shown again): %v", previews)
	}
	prv := previews[0].(map[string]any)["id"].(string)
	check("listPreviews", pl, 400, "GET", A+"/previews"+q+"&limit=x", reader, nil, "")
	check("listPreviews", pl, 401, "GET", A+"/previews"+q, "", nil, "")
	check("listPreviews", pl, 404, "GET", sb+"/sbx_nope/previews"+q, reader, nil, "")
	check("deletePreview", pd, 401, "DELETE", A+"/previews/"+prv+q, "", nil, "")
	check("deletePreview", pd, 403, "DELETE", A+"/previews/"+prv+q, reader, nil, "")
	check("deletePreview", pd, 404, "DELETE", A+"/previews/"+prv+"?graph=other", other, nil, "")
	check("deletePreview", pd, 204, "DELETE", A+"/previews/"+prv+q, admin, nil, "")
	check("deletePreview", pd, 404, "DELETE", A+"/previews/"+prv+q, admin, nil, "")
	codeCtx := codeContractRunning(t, check, admin, reader, other, A)

	const st, rs = "/v1/sandboxes/{id}/stop", "/v1/sandboxes/{id}/resume"
	check("stopSandbox", st, 401, "POST", A+"/stop"+q, "", nil, "")
	check("stopSandbox", st, 403, "POST", A+"/stop"+q, reader, nil, "")
	check("stopSandbox", st, 404, "POST", A+"/stop?graph=other", other, nil, "")
	check("stopSandbox", st, 409, "POST", sb+"/"+oneCallSandbox+"/stop"+q, admin, nil, "")
	if r := check("stopSandbox", st, 200, "POST", A+"/stop"+q, admin, nil, "").json(t); r["status"] != "stopped" || r["end_reason"] != "stopped" {
		t.Fatalf("stop: %v", r)
	}
	// A stopped sandbox runs nothing and has no reachable files.
	check("writeFile", fc, 409, "PUT", A+"/files/content"+q+"&path=x", admin, nil, "x")
	check("readFile", fc, 409, "GET", A+"/files/content"+q+"&path=dir/a.txt", admin, nil, "")
	check("listFiles", fl, 409, "GET", A+"/files"+q, admin, nil, "")
	check("makeDir", md, 409, "POST", A+"/files/mkdir"+q+"&path=d", admin, nil, "")
	check("removeFile", fl, 409, "DELETE", A+"/files"+q+"&path=dir", admin, nil, "")
	check("execCommand", sc, 409, "POST", A+"/commands"+q, admin, idem("l3-x2"), `{"argv": ["true"]}`)
	check("sandboxPty", pt, 409, "GET", A+"/pty"+q, admin, upgrade, "")
	check("previewURL", pu, 409, "POST", A+"/ports/80/url"+q, admin, nil, "")
	check("runInSandbox", rn, 409, "POST", A+"/run"+q, admin, idem("l3-x3"), runBody)
	check("createFile", gf, 409, "POST", gf+q+"&source_sandbox="+a+"&source_path=dir/a.txt", admin, nil, "")
	check("importFile", im, 409, "PUT", imq+sha, admin, nil, "")
	codeContractStopped(t, check, admin, A, codeCtx)

	// The graph may run one sandbox: B takes the place, so A cannot resume.
	// B is a session's: the same call again answers it (200), one that asks for another size
	// is refused, and an unknown size is invalid.
	b := check("createSandbox", sb, 201, "POST", sb+q, admin, nil, `{"session": "contract-b", "size": "small"}`).json(t)["id"].(string)
	if r := check("createSandbox", sb, 200, "POST", sb+q, admin, nil, `{"session": "contract-b"}`).json(t); r["id"] != b ||
		r["session"] != "contract-b" || r["size"] != "standard-2" || r["status"] != "running" {
		t.Fatalf("the session's sandbox again: %v", r)
	}
	if l := check("listSandboxes", sb, 200, "GET", sb+q+"&session=contract-b", reader, nil, "").json(t)["data"].([]any); len(l) != 1 || l[0].(map[string]any)["id"] != b {
		t.Fatalf("the sandboxes of session contract-b: %v", l)
	}
	if r := check("createSandbox", sb, 409, "POST", sb+q, admin, nil, `{"session": "contract-b", "size": "large"}`); r.errCode(t) != "session_mismatch" {
		t.Fatalf("another size: %s", r.body)
	}
	if r := check("createSandbox", sb, 400, "POST", sb+q, admin, nil, `{"size": "huge"}`); r.errCode(t) != "unknown_size" {
		t.Fatalf("an unknown size: %s", r.body)
	}
	check("createSandbox", sb, 429, "POST", sb+q, admin, nil, `{}`)
	check("resumeSandbox", rs, 429, "POST", A+"/resume"+q, admin, nil, "")
	check("deleteSandbox", sb+"/{id}", 401, "DELETE", sb+"/"+b+q, "", nil, "")
	check("deleteSandbox", sb+"/{id}", 403, "DELETE", sb+"/"+b+q, reader, nil, "")
	check("deleteSandbox", sb+"/{id}", 404, "DELETE", sb+"/"+b+"?graph=other", other, nil, "")
	if r := check("deleteSandbox", sb+"/{id}", 200, "DELETE", sb+"/"+b+q, admin, nil, "").json(t); r["status"] != "destroyed" || r["end_reason"] != "deleted" {
		t.Fatalf("delete: %v", r)
	}
	check("resumeSandbox", rs, 409, "POST", sb+"/"+b+"/resume"+q, admin, nil, "")
	check("resumeSandbox", rs, 401, "POST", A+"/resume"+q, "", nil, "")
	check("resumeSandbox", rs, 403, "POST", A+"/resume"+q, reader, nil, "")
	check("resumeSandbox", rs, 404, "POST", A+"/resume?graph=other", other, nil, "")
	if r := check("resumeSandbox", rs, 200, "POST", A+"/resume"+q, admin, nil, "").json(t); r["status"] != "running" {
		t.Fatalf("resume: %v", r)
	}
	if got := check("readFile", fc, 200, "GET", A+"/files/content"+q+"&path=imported/a.txt", admin, nil, ""); string(got.body) != "hello" {
		t.Fatalf("after resume: %q", got.body)
	}
	// Labels filter the list.
	if l := check("listSandboxes", sb, 200, "GET", sb+q+"&label=team=a", reader, nil, "").json(t); len(l["data"].([]any)) != 1 {
		t.Fatalf("label filter: %v", l)
	}
	check("stopSandbox", st, 200, "POST", A+"/stop"+q, admin, nil, "")
	return a
}
