package local

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, nil) }

func connect(t *testing.T, sb runtime.Sandbox) *agent.Client {
	t.Helper()
	c, err := agent.NewClient(sb.Conn())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sh(t *testing.T, c *agent.Client, script string) string {
	t.Helper()
	p, err := c.Exec(context.Background(), agent.ExecRequest{Argv: []string{"sh", "-c", script}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	ex, err := p.Wait(&out, &errb)
	if err != nil || ex.ExitCode != 0 {
		t.Fatalf("%q: %+v %v %s", script, ex, err, errb.String())
	}
	return out.String()
}

func TestLifecycle(t *testing.T) {
	state := t.TempDir()
	d := New(Options{AgentPath: testkit.Agent(t), StateDir: state})
	if err := runtime.CheckRequirements(d); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const id = "sbx_local1"
	if err := d.Create(ctx, runtime.Spec{ID: id}); err != nil {
		t.Fatal(err)
	}
	if err := d.Create(ctx, runtime.Spec{ID: id}); err == nil {
		t.Error("second Create succeeded")
	}
	if ids, err := d.List(ctx); err != nil || len(ids) != 1 || ids[0] != id {
		t.Errorf("List = %v, %v", ids, err)
	}
	if err := d.Stop(ctx, id); err != nil {
		t.Errorf("stop of a never started sandbox: %v", err)
	}
	sb, err := d.Start(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Start(ctx, id); err == nil {
		t.Error("second Start succeeded")
	}
	c := connect(t, sb)
	if err := c.WriteFile(ctx, "/workspace/keep", 0, strings.NewReader("persisted")); err != nil {
		t.Fatal(err)
	}
	out := sh(t, c, "cat keep; sleep 1000 >/dev/null 2>&1 & echo $!")
	if !strings.HasPrefix(out, "persisted") {
		t.Errorf("cat keep: %q", out)
	}
	if home := sh(t, c, "echo $HOME"); home != filepath.Join(state, id, "home")+"\n" {
		t.Errorf("HOME=%q", home)
	}
	bg, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(out, "persisted")))
	if st, err := sb.Stats(ctx); err != nil || st.Pids < 2 || st.MemoryBytes == 0 {
		t.Errorf("stats %+v %v", st, err)
	}
	agentPid := sb.(interface{ InitPID() int }).InitPID()

	if err := d.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after Stop")
	}
	for _, pid := range []int{agentPid, bg} {
		if alive(pid) {
			t.Errorf("pid %d survives Stop", pid)
		}
	}
	c.Close()

	sb, err = d.Start(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c = connect(t, sb)
	if out := sh(t, c, "cat keep"); out != "persisted" {
		t.Errorf("after restart: %q", out)
	}
	c.Close()

	if err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, id)); !os.IsNotExist(err) {
		t.Errorf("state left: %v", err)
	}
	if err := d.Destroy(ctx, id); err != nil {
		t.Errorf("second destroy: %v", err)
	}
	if _, err := d.Start(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("start after destroy: %v", err)
	}
	if err := d.Stop(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("stop after destroy: %v", err)
	}
}

func TestDestroyHungAgent(t *testing.T) {
	d := New(Options{AgentPath: testkit.Agent(t), StateDir: t.TempDir()})
	ctx := context.Background()
	if err := d.Create(ctx, runtime.Spec{ID: "sbx_hung"}); err != nil {
		t.Fatal(err)
	}
	sb, err := d.Start(ctx, "sbx_hung")
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, sb)
	defer c.Close()
	bg, _ := strconv.Atoi(strings.TrimSpace(sh(t, c, "sleep 1000 >/dev/null 2>&1 & echo $!")))
	pid := sb.(interface{ InitPID() int }).InitPID()
	syscall.Kill(pid, syscall.SIGSTOP)
	start := time.Now()
	if err := d.Destroy(ctx, "sbx_hung"); err != nil {
		t.Fatal(err)
	}
	t.Logf("destroy of a hung agent took %v", time.Since(start))
	for _, p := range []int{pid, bg} {
		if alive(p) {
			t.Errorf("pid %d survives Destroy", p)
		}
	}
}

// alive says whether pid runs (a zombie does not: it waits for its reaper).
func alive(pid int) bool {
	f, err := procStat(pid)
	return err == nil && f[2] != "Z"
}

func TestRequirements(t *testing.T) {
	d := New(Options{AgentPath: filepath.Join(t.TempDir(), "nope"), StateDir: t.TempDir()})
	if err := runtime.CheckRequirements(d); err == nil || !strings.Contains(err.Error(), "lbb-agent") {
		t.Errorf("missing agent: %v", err)
	}
	if err := New(Options{AgentPath: testkit.Agent(t), StateDir: t.TempDir()}).Create(context.Background(), runtime.Spec{ID: "../x"}); err == nil {
		t.Error("an id with a slash was accepted")
	}
}
