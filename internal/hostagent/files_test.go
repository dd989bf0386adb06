package hostagent

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// fakeAgent answers the agent protocol with h over HTTP/2 with prior knowledge, as the guest
// agent does after its Hello.
func fakeAgent(t *testing.T, h http.HandlerFunc) *agent.Client {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.NewClient(helloConn{Conn: conn, r: io.MultiReader(strings.NewReader(agent.Hello), conn)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ag.Close() })
	return ag
}

// helloConn reads the agent's Hello before what the server sends.
type helloConn struct {
	net.Conn
	r io.Reader
}

func (c helloConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// A program in the sandbox may consume its input file as soon as it lands: the write
// succeeded, so WriteFile answers the entry written, not 404.
func TestWriteFileRemovedBeforeStat(t *testing.T) {
	var got string
	ag := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == agent.PathFileContent:
			b, _ := io.ReadAll(r.Body)
			got = string(b)
			json.NewEncoder(w).Encode(agent.FileEntry{Path: "note.in", Name: "note.in", Type: agent.TypeFile, Size: int64(len(b))})
		case r.Method == http.MethodGet && r.URL.Path == agent.PathFiles:
			w.WriteHeader(agent.StatusOf(agent.CodeNotFound))
			json.NewEncoder(w).Encode(agent.Error{Code: agent.CodeNotFound, Message: "note.in: no such file or directory"})
		default:
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusTeapot)
		}
	})
	before := time.Now().UTC().Truncate(time.Second)
	e, err := writeFile(context.Background(), ag, "/workspace/note.in", strings.NewReader("hello\n"))
	if err != nil {
		t.Fatalf("writeFile: %v", err)
	}
	if got != "hello\n" {
		t.Fatalf("the agent received %q", got)
	}
	mtime, err := time.Parse(time.RFC3339, e.MTime)
	if err != nil || mtime.Before(before) || mtime.After(time.Now()) {
		t.Fatalf("mtime %q (%v), want about now", e.MTime, err)
	}
	e.MTime = ""
	if want := (FileEntry{Path: "note.in", Name: "note.in", Type: agent.TypeFile, Size: 6, Mode: "0644"}); e != want {
		t.Fatalf("entry %+v, want %+v", e, want)
	}
}
