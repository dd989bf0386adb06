package mux_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
	"github.com/littlebigbrain/lbb/internal/runtime/mux"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, nil) }

// freezing is a local driver that can also freeze (it counts the calls): a second kind of
// driver, so that routing to an ability is seen to reach the right one.
type freezing struct {
	*local.Driver
	mu     sync.Mutex
	frozen []string
}

func (f *freezing) Freeze(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen = append(f.frozen, id)
	return nil
}

func (f *freezing) Thaw(ctx context.Context, id string) error { return nil }

type env struct {
	dirA, dirB string
	a          *local.Driver
	b          *freezing
	m          *mux.Driver
}

// newEnv is a mux over two local drivers, "a" (the default) and "b", each on a state
// directory of its own; reopen makes new drivers on the same directories, as a restarted
// server does.
func newEnv(t *testing.T) *env {
	e := &env{dirA: t.TempDir(), dirB: t.TempDir()}
	e.reopen(t)
	t.Cleanup(func() {
		ctx := context.Background()
		ids, _ := e.m.List(ctx)
		for _, id := range ids {
			e.m.Destroy(ctx, id)
		}
	})
	return e
}

func (e *env) reopen(t *testing.T) {
	t.Helper()
	agentBin := testkit.Agent(t)
	e.a = local.New(local.Options{AgentPath: agentBin, StateDir: e.dirA})
	e.b = &freezing{Driver: local.New(local.Options{AgentPath: agentBin, StateDir: e.dirB})}
	m, err := mux.New(mux.Options{Default: "a", Drivers: map[string]runtime.Driver{"a": e.a, "b": e.b}})
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.CheckRequirements(m); err != nil {
		t.Fatal(err)
	}
	e.m = m
}

func list(t *testing.T, d runtime.Driver) []string {
	t.Helper()
	ids, err := d.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// echo runs a command in a started sandbox and answers its stdout.
// startEcho starts sandbox id through m and fails the test unless `echo word` in it prints
// word.
func startEcho(t *testing.T, m *mux.Driver, id, word string) {
	t.Helper()
	sb, err := m.Start(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := agent.NewClient(sb.Conn())
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Exec(context.Background(), agent.ExecRequest{Argv: []string{"echo", word}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if ex, err := p.Wait(&out, &errb); err != nil || ex.ExitCode != 0 {
		t.Fatalf("echo: %+v %v %s", ex, err, errb.String())
	}
	if got := out.String(); got != word+"\n" {
		t.Errorf("echo = %q", got)
	}
}

func TestRoute(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if got := e.m.Names(); !slices.Equal(got, []string{"a", "b"}) || e.m.Default() != "a" || e.m.Name() != "local" {
		t.Fatalf("Names = %v, Default = %q, Name = %q", got, e.m.Default(), e.m.Name())
	}
	if err := e.m.Create(ctx, runtime.Spec{ID: "sbx_mux1"}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Create(ctx, runtime.Spec{ID: "sbx_mux2", Runtime: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Create(ctx, runtime.Spec{ID: "sbx_mux3", Runtime: "a"}); err != nil {
		t.Fatal(err)
	}
	if got := list(t, e.a); !slices.Equal(got, []string{"sbx_mux1", "sbx_mux3"}) {
		t.Errorf("driver a holds %v, want sbx_mux1 and sbx_mux3", got)
	}
	if got := list(t, e.b); !slices.Equal(got, []string{"sbx_mux2"}) {
		t.Errorf("driver b holds %v, want sbx_mux2", got)
	}
	if got := list(t, e.m); !slices.Equal(got, []string{"sbx_mux1", "sbx_mux2", "sbx_mux3"}) {
		t.Errorf("mux lists %v, want all three", got)
	}
	for id, want := range map[string]string{"sbx_mux1": "a", "sbx_mux2": "b", "sbx_mux3": "a"} {
		if got, err := e.m.Runtime(id); err != nil || got != want {
			t.Errorf("Runtime(%s) = %q, %v; want %q", id, got, err, want)
		}
	}
	startEcho(t, e.m, "sbx_mux2", "on-b")
	if err := e.m.Stop(ctx, "sbx_mux2"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Destroy(ctx, "sbx_mux2"); err != nil {
		t.Fatal(err)
	}
	if got := list(t, e.b); len(got) != 0 {
		t.Errorf("driver b still holds %v after Destroy", got)
	}
	if _, err := e.m.Runtime("sbx_mux2"); !errors.Is(err, runtime.ErrNotFound) || !errdefs.IsNotFound(err) {
		t.Errorf("Runtime of a destroyed sandbox: %v, want ErrNotFound", err)
	}

	err := e.m.Create(ctx, runtime.Spec{ID: "sbx_mux4", Runtime: "microvm"})
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("Create on an unknown runtime: %v, want invalid_request", err)
	}
	if got := list(t, e.m); slices.Contains(got, "sbx_mux4") {
		t.Error("a Create on an unknown runtime left a sandbox")
	}
	if _, err := mux.New(mux.Options{Default: "c", Drivers: map[string]runtime.Driver{"a": e.a}}); err == nil {
		t.Error("New with a default that is not among the drivers succeeded")
	}
}

// TestRestart: a new mux (a restarted server) finds each sandbox's driver from the drivers'
// own state.
func TestRestart(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, s := range []runtime.Spec{{ID: "sbx_old1"}, {ID: "sbx_old2", Runtime: "b"}} {
		if err := e.m.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	startEcho(t, e.m, "sbx_old2", "before")
	if err := e.m.Stop(ctx, "sbx_old2"); err != nil {
		t.Fatal(err)
	}

	e.reopen(t)
	if got, err := e.m.Runtime("sbx_old2"); err != nil || got != "b" {
		t.Fatalf("after a restart, Runtime(sbx_old2) = %q, %v; want b", got, err)
	}
	startEcho(t, e.m, "sbx_old2", "after")
	if err := e.m.Freeze(ctx, "sbx_old2"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.b.frozen, []string{"sbx_old2"}) {
		t.Errorf("driver b froze %v", e.b.frozen)
	}

	// Without a Runtime call first: Destroy must find it too.
	e.reopen(t)
	if err := e.m.Destroy(ctx, "sbx_old1"); err != nil {
		t.Fatal(err)
	}
	if got := list(t, e.a); len(got) != 0 {
		t.Errorf("driver a still holds %v", got)
	}
	if err := e.m.Destroy(ctx, "sbx_never"); err != nil {
		t.Errorf("Destroy of an unknown id: %v, want nil", err)
	}
	if _, err := e.m.Start(ctx, "sbx_never"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Start of an unknown id: %v, want ErrNotFound", err)
	}
	if err := e.m.Stop(ctx, "sbx_never"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Stop of an unknown id: %v, want ErrNotFound", err)
	}
}

// TestNotSupported: an ability the sandbox's driver lacks is a Conflict with code
// not_supported, naming the runtime; one it has is routed to it.
func TestNotSupported(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.m.Create(ctx, runtime.Spec{ID: "sbx_ns1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Start(ctx, "sbx_ns1"); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"Freeze":       e.m.Freeze(ctx, "sbx_ns1"),
		"Thaw":         e.m.Thaw(ctx, "sbx_ns1"),
		"Checkpoint":   e.m.Checkpoint(ctx, "sbx_ns1", t.TempDir()),
		"SetCPUWeight": e.m.SetCPUWeight(ctx, "sbx_ns1", runtime.DefaultCPUWeight),
		"SetHostname":  e.m.SetHostname(ctx, "sbx_ns1", "box"),
	} {
		if !errdefs.IsConflict(err) || errdefs.CodeOf(err) != errdefs.CodeNotSupported {
			t.Errorf("%s on driver a: %v (code %s), want a conflict not_supported", what, err, errdefs.CodeOf(err))
		}
	}
	if _, err := e.m.Restore(ctx, "sbx_ns1", t.TempDir()); errdefs.CodeOf(err) != errdefs.CodeNotSupported {
		t.Errorf("Restore on driver a: %v, want not_supported", err)
	}
	// A fork: no driver here restores checkpoints.
	if _, err := e.m.Restore(ctx, "sbx_fork", t.TempDir()); errdefs.CodeOf(err) != errdefs.CodeNotSupported {
		t.Errorf("Restore of a new id: %v, want not_supported", err)
	}
	if err := e.m.Freeze(ctx, "sbx_missing"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Freeze of an unknown id: %v, want ErrNotFound", err)
	}
	if len(e.b.frozen) != 0 {
		t.Errorf("driver b froze %v, a sandbox it does not hold", e.b.frozen)
	}
}
