package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/errdefs"
)

// FuzzRouterMatch: matching never panics, and what it extracts rebuilds the path.
func FuzzRouterMatch(f *testing.F) {
	for _, p := range []string{"/v1/sandboxes/sbx_1", "/v1/sandboxes/templates/lbb/python", "//", "", "/v1/sandboxes/", "/v1/keys/x/y"} {
		f.Add(p)
	}
	s := &Server{}
	s.routes()
	f.Fuzz(func(t *testing.T, path string) {
		r, params, _ := s.router.find("GET", path)
		if r == nil {
			return
		}
		for k, v := range params {
			if v == "" {
				t.Fatalf("%s: empty parameter %s for %s", path, k, r.Pattern)
			}
			if !strings.HasSuffix(r.Pattern, "...}") && strings.Contains(v, "/") {
				t.Fatalf("%s: parameter %s=%q spans segments in %s", path, k, v, r.Pattern)
			}
		}
	})
}

// FuzzDecode: the request bodies of create/run, exec, run-in, template and key creation,
// through the decoder the handlers use. A body is accepted only when it is one JSON object;
// anything else is an invalid-argument error (400), never a panic or another class; what
// is accepted encodes back to a body that decodes to the same request.
func FuzzDecode(f *testing.F) {
	for _, b := range []string{
		`{"run": {"code": "def run(i, c): return i", "input": [1, 2], "language": "python"}, "wait_ms": 5}`,
		`{"template": "t", "env": {"A": "b"}, "limits": {"memory_mb": 256}, "expires_in_seconds": 60}`,
		`{"argv": ["sh", "-c", "echo hi"], "cwd": "/workspace", "stdin": "x", "timeout_ms": 1000}`,
		`{"name": "t1", "code": "x", "files": [{"path": "a", "content": "b"}], "config": {"k": 1}}`,
		`{"name": "ci", "graphs": ["main"], "scopes": ["sandboxes:read"]}`,
		`{} ]`, `{}{}`, `null`, `[]`, `"x"`, ` `, `{"argv": "no"}`, `{"unknown": 1}`, `{"input": 1e999}`,
	} {
		for kind := range uint8(5) {
			f.Add(kind, []byte(b))
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		newReq := []func() any{
			func() any { return new(control.CreateRequest) },
			func() any { return new(control.ExecRequest) },
			func() any { return new(control.RunInRequest) },
			func() any { return new(control.TemplateRequest) },
			func() any { return new(control.KeyRequest) },
		}[int(kind)%5]
		req := newReq()
		err := decode(body, req)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("%q: %v is not an invalid argument", body, err)
			}
			return
		}
		if trimmed := bytes.TrimSpace(body); !json.Valid(body) || trimmed[0] != '{' {
			t.Fatalf("%q accepted: it is not one JSON object", body)
		}
		enc, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("%q: encoding the request: %v", body, err)
		}
		again := newReq()
		if err := decode(enc, again); err != nil {
			t.Fatalf("%q encodes to %s, which does not decode: %v", body, enc, err)
		}
		if enc2, _ := json.Marshal(again); !bytes.Equal(enc, enc2) {
			t.Fatalf("%q: %s decodes to %s", body, enc, enc2)
		}
	})
}

// FuzzLastEventID: whatever a client sends as Last-Event-ID resumes at offsets that are not
// negative, and the ids the server sends parse back to the offsets they name.
func FuzzLastEventID(f *testing.F) {
	for _, s := range []string{"", "0.0", "12.34", "-1.5", "1.-5", "1", "1.2.3", "+1.2", "9223372036854775807.1", "9223372036854775808.0", " 1.2", "a.b"} {
		f.Add(s, int64(3), int64(4))
	}
	f.Fuzz(func(t *testing.T, v string, x, y int64) {
		a, b := parseLastEventID(v)
		if a < 0 || b < 0 {
			t.Fatalf("%q: %d.%d", v, a, b)
		}
		if a2, b2 := parseLastEventID(fmt.Sprintf("%d.%d", a, b)); a2 != a || b2 != b {
			t.Fatalf("%q: %d.%d, which parses to %d.%d", v, a, b, a2, b2)
		}
		sw := &sseWriter{next: map[string]int64{"stdout": x, "stderr": y}}
		a, b = parseLastEventID(sw.id())
		if x >= 0 && y >= 0 && (a != x || b != y) || (x < 0 || y < 0) && (a != 0 || b != 0) {
			t.Fatalf("id %q for %d.%d parses to %d.%d", sw.id(), x, y, a, b)
		}
	})
}

// FuzzSSEChunks: output cut anywhere and sent as stdout events arrives whole: each event's
// offset is where the one before ended, its data is valid UTF-8 (base64 carries the exact
// bytes when they are not), a chunk ends inside a UTF-8 sequence only at the end of the
// stream, and each event's id resumes after it.
func FuzzSSEChunks(f *testing.F) {
	f.Add([]byte("hello\nworld\n"), []byte{3, 1})
	f.Add([]byte("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), []byte{4, 1, 1, 2})
	f.Add([]byte("\xff\xfe bad \xc3"), []byte{1, 1, 1})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		rec := httptest.NewRecorder()
		sw := &sseWriter{w: rec, rc: http.NewResponseController(rec), next: map[string]int64{}, held: map[string][]byte{}}
		off := 0
		for _, c := range cuts {
			n := min(len(data)-off, int(c))
			sw.chunk("stdout", int64(off), data[off:off+n], false)
			off += n
		}
		sw.chunk("stdout", int64(off), data[off:], true)
		sw.flushHeld("stdout")
		var got []byte
		for _, ev := range strings.Split(rec.Body.String(), "\n\n") {
			if ev == "" {
				continue
			}
			lines := strings.Split(ev, "\n")
			if len(lines) != 3 || lines[1] != "event: stdout" {
				t.Fatalf("event %q", ev)
			}
			var c sseChunk
			if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[2], "data: ")), &c); err != nil {
				t.Fatalf("event %q: %v", ev, err)
			}
			b := []byte(c.Data)
			if c.Base64 != "" {
				var err error
				if b, err = base64.StdEncoding.DecodeString(c.Base64); err != nil {
					t.Fatal(err)
				}
			}
			if c.Offset != int64(len(got)) || !utf8.ValidString(c.Data) || len(b) == 0 {
				t.Fatalf("event %q after %d bytes", ev, len(got))
			}
			got = append(got, b...)
			if a, _ := parseLastEventID(strings.TrimPrefix(lines[0], "id: ")); a != int64(len(got)) {
				t.Fatalf("event %q: id resumes at %d, not %d", ev, a, len(got))
			}
			if len(got) < len(data) && incompleteTail(b) > 0 && utf8.Valid(data) {
				t.Fatalf("event %q ends inside a UTF-8 sequence", ev)
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("sent %q, got %q", data, got)
		}
	})
}
