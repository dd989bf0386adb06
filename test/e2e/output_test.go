//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/testkit"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// seqN is how far the output tests count: 22.9 MB of output, far more than the server holds
// for a reader (1 MiB) and the host ⇄ guest window (4 MiB) together.
const seqN = 3000000

// TestOutputWhole: the output of a command reaches the caller who started it byte for byte,
// through lbb sandbox exec and through the Go SDK's Commands.Run, on both drivers, also when
// the caller reads slowly (the process is slowed, no byte is dropped). With
// LBB_E2E_REMOTE_HOST=1 the output also crosses the remote host agent's wire.
func TestOutputWhole(t *testing.T) {
	s := startServer(t)
	want := seqOutput(t)
	for _, isolation := range []string{"ns", "gvisor"} {
		t.Run(isolation, func(t *testing.T) {
			if isolation == "gvisor" {
				if _, why := runsc(); why != "" {
					testkit.SkipPrivileged(t, "%s", why)
				}
			}
			c, sb := s.sandbox(t, lbb.CreateParams{Isolation: isolation, ExpiresInSeconds: 600})
			seq := []string{"sandbox", "exec", "--timeout-ms", "300000", sb.ID, "--", "seq", "1", strconv.Itoa(seqN)}

			t.Run("cli", func(t *testing.T) {
				out, errb, err := s.cli(seq...)
				if code := exitCode(t, err); code != 0 || out != string(want) {
					t.Errorf("exit %d, %d of %d bytes (equal: %v), stderr %q", code, len(out), len(want), out == string(want), lastLines(errb, 3))
				}
			})
			t.Run("cli to a slow pipe", func(t *testing.T) {
				cmd := exec.Command(lbbBin, seq...)
				cmd.Env = append(os.Environ(), "LBB_URL="+s.url, "LBB_API_KEY="+s.key, "LBB_GRAPH=main")
				var errb bytes.Buffer
				cmd.Stderr = &errb
				pipe, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				got, reads := slowRead(pipe, 64<<10, 2*time.Millisecond)
				if code := exitCode(t, cmd.Wait()); code != 0 || !bytes.Equal(got, want) {
					t.Errorf("exit %d after %d reads, %d of %d bytes (equal: %v), stderr %q", code, reads, len(got), len(want), bytes.Equal(got, want), errb.String())
				}
				checkSlowed(t, c, reads, 2*time.Millisecond)
			})
			t.Run("sdk", func(t *testing.T) {
				var out, errs bytes.Buffer
				res, err := c.Commands.Run(bg, sb.ID, lbb.CommandParams{
					ExecParams:  lbb.ExecParams{Cmd: "seq 1 " + strconv.Itoa(seqN) + "; echo done >&2", TimeoutMs: 300000},
					OnStdout:    func(b []byte) { out.Write(b) },
					OnStderr:    func(b []byte) { errs.Write(b) },
					OutputLimit: 1 << 20,
				})
				if err != nil {
					t.Fatal(err)
				}
				if res.Status != lbb.StatusSucceeded || !bytes.Equal(out.Bytes(), want) || errs.String() != "done\n" {
					t.Errorf("%s: %d of %d bytes (equal: %v), stderr %q", res.Status, out.Len(), len(want), bytes.Equal(out.Bytes(), want), errs.String())
				}
				if !bytes.Equal(res.Stdout, want[:1<<20]) || !res.Truncated || string(res.Stderr) != "done\n" {
					t.Errorf("the result keeps %d bytes of stdout (truncated %v), stderr %q", len(res.Stdout), res.Truncated, res.Stderr)
				}
				if o := res.Command.Stdout; o.Bytes != int64(len(want)) || !o.Truncated || o.DroppedBytes != o.Bytes-int64(len(o.Head)+len(o.Tail)) {
					t.Errorf("the record's stdout: %d bytes, truncated %v, dropped %d, head %d, tail %d", o.Bytes, o.Truncated, o.DroppedBytes, len(o.Head), len(o.Tail))
				}
			})
			t.Run("sdk to a slow callback", func(t *testing.T) {
				var out bytes.Buffer
				chunks := 0
				res, err := c.Commands.Run(bg, sb.ID, lbb.CommandParams{
					ExecParams: lbb.ExecParams{Argv: []string{"seq", "1", strconv.Itoa(seqN)}, TimeoutMs: 300000},
					OnStdout: func(b []byte) {
						out.Write(b)
						chunks++
						time.Sleep(2 * time.Millisecond)
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				if res.Status != lbb.StatusSucceeded || !bytes.Equal(out.Bytes(), want) {
					t.Errorf("%s: %d of %d bytes (equal: %v)", res.Status, out.Len(), len(want), bytes.Equal(out.Bytes(), want))
				}
				if min := int64(chunks) * 2 / 2; res.Command.DurationMs < min { // half the callbacks' pauses
					t.Errorf("the command took %d ms for %d chunks read 2 ms apart: it did not wait for its reader", res.Command.DurationMs, chunks)
				}
			})
		})
	}
}

// TestOutputStarterGoesAway: a caller that started a command with its output held and went
// away does not leave the process waiting for it: the server lets go of the hold, the command
// runs to its end, and its record keeps head and tail as for any command.
func TestOutputStarterGoesAway(t *testing.T) {
	s := startServer(t)
	c, sb := s.sandbox(t, lbb.CreateParams{ExpiresInSeconds: 600})
	st, err := c.Sandboxes.ExecStream(bg, sb.ID, lbb.ExecParams{Argv: []string{"seq", "1", strconv.Itoa(seqN)}, TimeoutMs: 300000})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Next() || st.Chunk().Offset != 0 || !bytes.HasPrefix(st.Chunk().Data, []byte("1\n2\n")) {
		t.Fatalf("the first chunk: %+v %v", st.Chunk(), st.Err())
	}
	id := st.Command().ID
	st.Close()
	cmd, err := c.Commands.Get(bg, id, 60000)
	if err != nil || cmd.Status != lbb.StatusSucceeded {
		t.Fatalf("the command after its starter went away: %+v %v", cmd, err)
	}
	if cmd.Stdout.Bytes != int64(len(seqOutput(t))) || !cmd.Stdout.Truncated || cmd.Stdout.Tail == "" || cmd.Stdout.Head == "" {
		t.Errorf("its record's stdout: %+v", cmd.Stdout)
	}
}

// TestOutputStreamResumes: a client whose stream broke sends the same start again (its
// Idempotency-Key and Last-Event-ID) and reads on where it was, the process having waited
// for it (the server holds the output for a while after its reader went away): nothing twice,
// nothing lost, though the output is far more than a record keeps.
func TestOutputStreamResumes(t *testing.T) {
	s := startServer(t)
	_, sb := s.sandbox(t, lbb.CreateParams{ExpiresInSeconds: 600})
	path := "/v1/sandboxes/" + sb.ID + "/commands?graph=main"
	body := `{"argv": ["bash", "-c", "echo a; sleep 1; seq 1 2000000"], "stream": true}`
	rest, err := exec.Command("seq", "1", "2000000").Output()
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{"Idempotency-Key": "resume-1", "Accept": "text/event-stream"}
	req, err := http.NewRequest("POST", s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	first := bufio.NewReader(resp.Body)
	var seen strings.Builder
	for !strings.Contains(seen.String(), `"data":"a\n"}`+"\n\n") {
		line, err := first.ReadString('\n')
		if err != nil {
			t.Fatalf("the first stream ended before its first chunk: %v: %s", err, seen.String())
		}
		seen.WriteString(line)
	}
	resp.Body.Close() // the connection breaks
	// Meanwhile the process writes far more than the hold and the guest channel take: it waits.
	time.Sleep(3 * time.Second)

	hdr["Last-Event-ID"] = "2.0"
	r := s.call("POST", path, "", hdr, body)
	b := string(r.body)
	var got bytes.Buffer
	for _, line := range strings.Split(b, "\n") {
		var c struct {
			Stream string
			Offset int64
			Data   string
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok && json.Unmarshal([]byte(d), &c) == nil && c.Stream == "stdout" {
			if c.Offset != int64(2+got.Len()) {
				t.Fatalf("a chunk at %d after %d bytes", c.Offset, 2+got.Len())
			}
			got.WriteString(c.Data)
		}
	}
	if r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" || !strings.HasPrefix(b, "event: command\n") ||
		!bytes.Equal(got.Bytes(), rest) || !regexp.MustCompile(`event: exit\ndata: \{[^\n]*"status":"succeeded"`).MatchString(b) {
		t.Errorf("the resumed stream: %d %v, %d of %d bytes after the break (equal %v)\n%s", r.status, r.header, got.Len(), len(rest),
			bytes.Equal(got.Bytes(), rest), clip(b))
	}
}

func seqOutput(t *testing.T) []byte {
	t.Helper()
	want, err := exec.Command("seq", "1", strconv.Itoa(seqN)).Output()
	if err != nil {
		t.Fatalf("the host's seq: %v", err)
	}
	return want
}

// slowRead reads r to its end n bytes at a time, pausing between reads.
func slowRead(r io.Reader, n int, pause time.Duration) ([]byte, int) {
	var got bytes.Buffer
	buf := make([]byte, n)
	reads := 0
	for {
		k, err := r.Read(buf)
		got.Write(buf[:k])
		reads++
		if err != nil {
			return got.Bytes(), reads
		}
		time.Sleep(pause)
	}
}

// checkSlowed checks that the newest command of the server waited for its reader: it ran at
// least half as long as the reader's pauses.
func checkSlowed(t *testing.T, c *lbb.Client, reads int, pause time.Duration) {
	t.Helper()
	l, err := c.Commands.List(bg, lbb.ListParams{Limit: 1})
	if err != nil || len(l.Data) != 1 {
		t.Fatalf("listing commands: %v", err)
	}
	if min := int64(reads) * pause.Milliseconds() / 2; l.Data[0].DurationMs < min {
		t.Errorf("the command took %d ms for %d reads %s apart: it did not wait for its reader", l.Data[0].DurationMs, reads, pause)
	}
}
