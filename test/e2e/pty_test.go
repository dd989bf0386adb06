package e2e

import (
	"testing"

	"github.com/littlebigbrain/lbb/internal/testkit/ptytest"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// TestPty drives a terminal over the API's WebSocket on ns and gvisor: a real pty in the
// sandbox (size, resize, state across lines, full-screen output, ^C), a dropped connection
// re-attached with its recent output, the exit code and the record; every line of seq's
// output, read fast and slowly; then a flood of output through a terminal.
func TestPty(t *testing.T) {
	for _, rt := range []string{"ns", "gvisor"} {
		t.Run(rt, func(t *testing.T) {
			if rt == "gvisor" {
				requireGvisor(t)
			}
			s := startServer(t, "--runtime", rt, "--pool=false")
			c, sb := s.sandbox(t, lbb.CreateParams{ExpiresInSeconds: 600})
			ptytest.Drive(t, c, sb.ID)
			// Output held for the client: every line of a burst, read fast or slowly (past
			// the host agent's 1 MiB hold, so the program waits for the reader).
			ptytest.Lines(t, c, sb.ID, 30000, false)
			ptytest.Lines(t, c, sb.ID, 200000, true)
			ptytest.LinesReattach(t, c, sb.ID, 300000)
			// A flood through a terminal grows the server by bounded buffers, not by the flood.
			_, peak0 := rss(t, s.cmd.Process.Pid)
			ptytest.Flood(t, c, sb.ID, 32<<20)
			if _, peak := rss(t, s.cmd.Process.Pid); peak-peak0 > 16<<20 {
				t.Errorf("32 MiB through a terminal grew the server's peak RSS by %d MiB", (peak-peak0)>>20)
			} else {
				t.Logf("32 MiB through a terminal: the server's peak RSS grew by %d MiB", (peak-peak0)>>20)
			}
			ptytest.Pause(t, c, sb.ID, rt == "gvisor")
		})
	}
}
