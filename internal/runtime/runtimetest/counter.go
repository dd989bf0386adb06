package runtimetest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// CounterServer is a shell script that starts, in a sandbox, a Python process holding a
// random value in memory only and answering it, with a count of the questions so far, on
// 127.0.0.1:7777. It leaves the agent's process group, so it outlives the command that
// started it, as a background server does: what a pause, a snapshot or a fork keeps of a
// sandbox's memory and processes shows in what it answers next (AskCounter).
const CounterServer = `setsid python3 -c '
import os, socket
v = os.urandom(8).hex()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7777)); s.listen()
n = 0
while True:
    c, _ = s.accept(); n += 1
    c.sendall(("%s %d" % (v, n)).encode()); c.close()
' </dev/null >/dev/null 2>&1 &
for i in $(seq 600); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 7777)).close()' 2>/dev/null && break; sleep 0.1; done`

// AskCounter asks the CounterServer in the sandbox c reaches, and answers its value and
// count (the count includes this question and the one CounterServer's start made).
func AskCounter(ctx context.Context, c *agent.Client) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	p, err := c.Exec(ctx, agent.ExecRequest{ID: fmt.Sprintf("ask%d", time.Now().UnixNano()),
		Argv: []string{"python3", "-c", `import socket; print(socket.create_connection(("127.0.0.1", 7777)).recv(100).decode())`}}, nil)
	if err != nil {
		return "", 0, err
	}
	var out, errb strings.Builder
	ex, err := p.Wait(&out, &errb)
	if err != nil || ex.ExitCode != 0 {
		return "", 0, fmt.Errorf("asking the counter: %+v %v: %s", ex, err, errb.String())
	}
	var v string
	var n int
	if _, err := fmt.Sscan(out.String(), &v, &n); err != nil {
		return "", 0, fmt.Errorf("the counter said %q: %w", out.String(), err)
	}
	return v, n, nil
}
