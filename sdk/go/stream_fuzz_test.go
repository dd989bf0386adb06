package lbb_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// replay answers every request with body as an event stream.
type replay []byte

func (b replay) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(b)), Request: r}, nil
}

// readStream reads body through Commands.Output, as a caller does.
func readStream(t *testing.T, body []byte) ([]lbb.OutputChunk, *lbb.OutputStream) {
	c, err := lbb.New(lbb.Options{BaseURL: "http://lbb.invalid", APIKey: "k", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: replay(body)}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Commands.Output(context.Background(), "cmd_1", "both", true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var chunks []lbb.OutputChunk
	for s.Next() {
		if len(chunks) > len(body) {
			t.Fatalf("%d chunks from %d bytes", len(chunks), len(body))
		}
		chunks = append(chunks, s.Chunk())
	}
	return chunks, s
}

// FuzzOutputStream: the SDK's event-stream parser never panics nor loops on any bytes, and
// reads back exactly the chunks and the exit record a server writes, however the output is
// cut, with comments between events and CRLF line ends.
func FuzzOutputStream(f *testing.F) {
	f.Add([]byte("hello\nworld\n"), []byte{3, 0x81, 2}, false)
	f.Add([]byte("caf\xc3\xa9 \xff\xfe"), []byte{4, 0x41}, true)
	f.Add([]byte("id: 1.2\nevent: stdout\ndata: {\"data\":\"x\"}\n\n"), []byte{}, false)
	f.Add([]byte("event: exit\ndata: {\"id\":\ndata: \"c\"}\n\n"), []byte{1}, true)
	f.Fuzz(func(t *testing.T, data, cuts []byte, crlf bool) {
		readStream(t, data) // any bytes: no panic, no endless loop

		var want []lbb.OutputChunk
		var wire bytes.Buffer
		next := map[string]int64{}
		line := func(s string) {
			wire.WriteString(s)
			if crlf {
				wire.WriteString("\r")
			}
			wire.WriteString("\n")
		}
		for off := 0; off < len(data); {
			cut := byte(1)
			if len(cuts) > 0 {
				cut, cuts = cuts[0], cuts[1:]
			}
			n := min(len(data)-off, max(1, int(cut&0x3f)))
			stream := "stdout"
			if cut&0x80 != 0 {
				stream = "stderr"
			}
			piece := data[off : off+n]
			ev := map[string]any{"stream": stream, "offset": next[stream], "data": strings.ToValidUTF8(string(piece), "\uFFFD")}
			if !utf8.Valid(piece) {
				ev["base64"] = base64.StdEncoding.EncodeToString(piece)
			}
			b, _ := json.Marshal(ev)
			want = append(want, lbb.OutputChunk{Stream: stream, Offset: next[stream], Data: piece})
			next[stream] += int64(n)
			line(fmt.Sprintf("id: %d.%d", next["stdout"], next["stderr"]))
			line("event: " + stream)
			line("data: " + string(b))
			line("")
			if cut&0x40 != 0 {
				line(": keepalive")
				line("")
			}
			off += n
		}
		exit, _ := json.MarshalIndent(map[string]any{"id": "cmd_1", "status": "exited", "exit_code": 3}, "", "  ")
		line("event: exit")
		for _, l := range strings.Split(string(exit), "\n") {
			line("data: " + l)
		}
		line("")

		got, s := readStream(t, wire.Bytes())
		if s.Err() != nil {
			t.Fatalf("%q: %v", wire.Bytes(), s.Err())
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d chunks, want %d", wire.Bytes(), len(got), len(want))
		}
		for i := range want {
			if got[i].Stream != want[i].Stream || got[i].Offset != want[i].Offset || !bytes.Equal(got[i].Data, want[i].Data) {
				t.Fatalf("chunk %d: %+v, want %+v", i, got[i], want[i])
			}
		}
		if e := s.Exit(); e == nil || e.ID != "cmd_1" || e.ExitCode == nil || *e.ExitCode != 3 {
			t.Fatalf("exit %+v", e)
		}
	})
}
