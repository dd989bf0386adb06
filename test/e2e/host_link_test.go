//go:build linux

package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/hostagent/remote"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// floodServer floods every connection to its port and never reads one.
const floodServer = `import asyncio, sys
async def flood(r, w):
    chunk = b"x" * 65536
    try:
        while True:
            w.write(chunk)
            await w.drain()
    except Exception:
        pass
async def main():
    srv = await asyncio.start_server(flood, "127.0.0.1", int(sys.argv[1]), backlog=512)
    await srv.serve_forever()
asyncio.run(main())
`

// TestHostLinkUnread: 300 preview connections through lbb host, to servers in two sandboxes
// that flood them and never read, left unread by the control plane's side too (slow
// visitors): a third sandbox's creation, a command in it, a file up and down and an Info
// still go through the link at once. With Go's default windows the creation hung
// (remote.maxStreams).
func TestHostLinkUnread(t *testing.T) {
	requireEnv(t)
	const port, perSandbox = 18090, 150
	dir := filepath.Join(newDataDir(t), "data")
	token := rand.Text()
	log := &testkit.Buffer{}
	p, url := launch(t, []string{"host", "--listen", "127.0.0.1:0", "--token", token, "--data-dir", dir,
		"--images-dir", imagesDir, "--cgroup-parent", "lbb-e2e-hostlink"}, log, hostLine)
	c, err := remote.NewClient(url, token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var ids []string
	defer func() {
		for _, id := range ids {
			dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
			c.Destroy(dctx, id)
			dcancel()
		}
		p.end(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("lbb host log:\n%s", lastLines(log.String(), 40))
		}
	}()
	create := func(ctx context.Context) string {
		id := "sbx_" + strings.ToLower(rand.Text()[:12])
		if _, err := c.Create(ctx, hostagent.CreateRequest{ID: id, Runtime: "ns",
			Limits: runtime.Limits{MemoryMiB: 256, CPUs: 1, Pids: 64, DiskMiB: 64}}); err != nil {
			t.Fatalf("create: %v", err)
		}
		ids = append(ids, id)
		return id
	}
	var conns []net.Conn
	var sent atomic.Int64
	var writers sync.WaitGroup
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
		writers.Wait()
	}()
	for range 2 {
		id := create(ctx)
		if _, err := c.WriteFile(ctx, id, "flood.py", strings.NewReader(floodServer)); err != nil {
			t.Fatal(err)
		}
		if err := c.Exec(ctx, hostagent.ExecRequest{SandboxID: id, CommandID: "cmd_" + strings.ToLower(rand.Text()[:12]),
			Argv: []string{"python3", "flood.py", fmt.Sprint(port)}, Cwd: "/workspace", Timeout: time.Hour}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < perSandbox; i++ {
			conn, err := c.DialPort(ctx, id, port)
			if err != nil && i == 0 && ctx.Err() == nil {
				time.Sleep(200 * time.Millisecond) // the server is starting
				i--
				continue
			}
			if err != nil {
				t.Fatalf("connect %d to %s: %v", i, id, err)
			}
			conns = append(conns, conn)
			writers.Go(func() {
				chunk := make([]byte, 32<<10)
				for {
					if _, err := conn.Write(chunk); err != nil {
						return
					}
					sent.Add(int64(len(chunk)))
				}
			})
		}
	}
	time.Sleep(3 * time.Second)
	t.Logf("%d unread port connections: %d KiB sent a connection toward servers that never read", len(conns), sent.Load()/int64(len(conns))>>10)

	bctx, bcancel := context.WithTimeout(ctx, time.Minute)
	defer bcancel()
	start := time.Now()
	other := create(bctx)
	cmd := "cmd_" + strings.ToLower(rand.Text()[:12])
	if err := c.Exec(bctx, hostagent.ExecRequest{SandboxID: other, CommandID: cmd, Argv: []string{"echo", "alive"}, HeadBytes: 100, TailBytes: 100}); err != nil {
		t.Fatalf("a command beside the unread connections: %v", err)
	}
	if end, err := c.Wait(bctx, cmd); err != nil || !strings.Contains(end.Stdout.Head+end.Stdout.Tail, "alive") {
		t.Errorf("a command beside the unread connections: %+v %v", end, err)
	}
	payload := strings.Repeat("0123456789abcdef", 128<<10) // 2 MiB
	if _, err := c.WriteFile(bctx, other, "f", strings.NewReader(payload)); err != nil {
		t.Errorf("a file upload beside the unread connections: %v", err)
	} else if _, rc, err := c.OpenFile(bctx, other, "f"); err != nil {
		t.Errorf("a file download beside the unread connections: %v", err)
	} else {
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(got) != payload {
			t.Errorf("a file download beside the unread connections: %d bytes, %v", len(got), err)
		}
	}
	if _, err := c.Info(bctx); err != nil {
		t.Errorf("Info beside the unread connections: %v", err)
	}
	t.Logf("a command, a 2 MiB file up and down and an Info beside %d unread connections took %v", len(conns), time.Since(start))
}
