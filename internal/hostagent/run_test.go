package hostagent_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
	"github.com/littlebigbrain/lbb/internal/store"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// These tests run real runs through the local driver: the real guest agent and harnesses
// as plain subprocesses, without isolation (the e2e tests run the ns driver).

var agentBin string

func TestMain(m *testing.M) { testkit.Main(m, &agentBin) }

func newHost(t *testing.T) (*hostagent.Local, runtime.Driver) {
	t.Helper()
	d := local.New(local.Options{AgentPath: agentBin, StateDir: t.TempDir()})
	return hostagent.NewLocal(hostagent.Options{Driver: d, Rootfs: "/", DataDir: t.TempDir()}), d
}

func requirePython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("the local driver runs the host's python3, and there is none")
	}
}

func spec(code, input string) hostagent.RunRequest {
	return hostagent.RunRequest{SandboxID: ids.New(ids.Sandbox), CommandID: ids.New(ids.Command),
		Limits: runtime.Limits{MemoryMiB: 512}, Language: "python", Code: code, Input: json.RawMessage(input),
		Config: json.RawMessage(`{}`), Timeout: 20 * time.Second, HeadBytes: 64, TailBytes: 64}
}

func TestRunOnce(t *testing.T) {
	requirePython(t)
	h, d := newHost(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		spec   hostagent.RunRequest
		status string
		check  func(t *testing.T, out hostagent.RunResult)
	}{
		{"sum", spec("def run(input, config):\n    return sum(input)", "[1,2,3]"), store.CommandSucceeded, func(t *testing.T, out hostagent.RunResult) {
			if !out.OK || string(out.Result) != "6" || out.ExitCode == nil || *out.ExitCode != 0 {
				t.Fatalf("%+v", out)
			}
		}},
		{"raise", spec("def run(input, config):\n    raise ValueError('boom')", "null"), store.CommandFailed, func(t *testing.T, out hostagent.RunResult) {
			if all := out.Stderr.Head + out.Stderr.Tail; out.OK || !strings.Contains(all, "Traceback") || !strings.Contains(all, "ValueError: boom") {
				t.Fatalf("%+v", out)
			}
		}},
		{"head and tail", spec("def run(input, config):\n    for i in range(1000):\n        print(f'line {i:04d}')", "null"), store.CommandSucceeded, func(t *testing.T, out hostagent.RunResult) {
			if out.Stdout.Bytes != 10000 || !strings.HasPrefix(out.Stdout.Head, "line 0000") || !strings.HasSuffix(out.Stdout.Tail, "line 0999\n") || len(out.Stdout.Head) > 64 {
				t.Fatalf("stdout %+v", out.Stdout)
			}
		}},
		{"env masked", func() hostagent.RunRequest {
			s := spec("import os\ndef run(input, config):\n    print('token is', os.environ['TOKEN'])\n    raise RuntimeError(os.environ['TOKEN'])", "null")
			s.Env = map[string]string{"TOKEN": "s3cr3t-value"}
			return s
		}(), store.CommandFailed, func(t *testing.T, out hostagent.RunResult) {
			b, _ := json.Marshal(out)
			if strings.Contains(string(b), "s3cr3t") || !strings.Contains(out.Stdout.Head+out.Stdout.Tail, "token is ***") {
				t.Fatalf("secret shows: %s", b)
			}
		}},
		{"script", func() hostagent.RunRequest {
			s := spec("import math\nprint(math.factorial(20))", "null")
			s.Script = true
			return s
		}(), store.CommandSucceeded, func(t *testing.T, out hostagent.RunResult) {
			if !out.OK || out.Stdout.Head+out.Stdout.Tail != "2432902008176640000\n" || *out.ExitCode != 0 {
				t.Fatalf("%+v", out)
			}
		}},
		{"script exits 3", func() hostagent.RunRequest {
			s := spec("echo oops >&2; exit 3", "null")
			s.Language, s.Script = "shell", true
			return s
		}(), store.CommandFailed, func(t *testing.T, out hostagent.RunResult) {
			if out.OK || *out.ExitCode != 3 || out.Stderr.Head+out.Stderr.Tail != "oops\n" || out.Error != "the script exited with code 3" {
				t.Fatalf("%+v", out)
			}
		}},
		{"timeout", func() hostagent.RunRequest {
			s := spec("import time\ndef run(input, config):\n    time.sleep(30)", "null")
			s.Timeout = 500 * time.Millisecond
			return s
		}(), store.CommandTimedOut, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := run(t, h, ctx, tc.spec)
			if out.Status != tc.status {
				t.Fatalf("status %s, want %s: %+v", out.Status, tc.status, out)
			}
			end := release(t, h, tc.spec)
			if out.EndReason != store.EndRunFinished || out.SandboxStarted.IsZero() || end.At.Before(out.Ended) || end.Error != "" {
				t.Fatalf("sandbox life: %+v %+v", out, end)
			}
			if tc.check != nil {
				tc.check(t, out)
			}
		})
	}
	held, err := d.List(ctx)
	if err != nil || len(held) != 0 {
		t.Fatalf("sandboxes left after runs: %v %v", held, err)
	}
}

func TestRunOnceCancelled(t *testing.T) {
	requirePython(t)
	h, d := newHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s := spec("import time\ndef run(input, config):\n    time.sleep(30)", "null")
	out := run(t, h, ctx, s)
	release(t, h, s)
	if out.Status != store.CommandKilled || out.EndReason != store.EndServerShutdown {
		t.Fatalf("%s %s", out.Status, out.EndReason)
	}
	if held, _ := d.List(context.Background()); len(held) != 0 {
		t.Fatalf("left %v", held)
	}
}

func TestRunOnceStartFailure(t *testing.T) {
	d := local.New(local.Options{AgentPath: "/nonexistent/lbb-agent", StateDir: t.TempDir()})
	h := hostagent.NewLocal(hostagent.Options{Driver: d, Rootfs: "/"})
	s := spec("x", "null")
	out := run(t, h, context.Background(), s)
	release(t, h, s)
	if out.Status != store.CommandFailed || out.EndReason != store.EndFailed || out.Infrastructure == "" {
		t.Fatalf("%+v", out)
	}
	if held, _ := d.List(context.Background()); len(held) != 0 {
		t.Fatalf("a failed start left %v", held)
	}
}

func TestReap(t *testing.T) {
	h, d := newHost(t)
	ctx := context.Background()
	keep, drop := ids.New(ids.Sandbox), ids.New(ids.Sandbox)
	for _, id := range []string{keep, drop} {
		if err := d.Create(ctx, runtime.Spec{ID: id, Image: "/"}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	reaped, err := h.Reap(ctx, []string{keep})
	if err != nil || len(reaped) != 1 || reaped[0] != drop {
		t.Fatalf("reaped %v %v", reaped, err)
	}
	held, _ := d.List(ctx)
	if len(held) != 1 || held[0] != keep {
		t.Fatalf("held %v", held)
	}
	d.Destroy(ctx, keep)
}

// A sandbox claimed ahead of its run serves that run, and one cancelled unused is destroyed.
func TestClaim(t *testing.T) {
	requirePython(t)
	h, d := newHost(t)
	ctx := context.Background()
	s := spec("def run(input, config):\n    return sum(input)", "[1,2,3]")
	if err := h.Claim(ctx, s); err != nil {
		t.Fatal(err)
	}
	out := run(t, h, ctx, s)
	if out.Status != store.CommandSucceeded || string(out.Result) != "6" {
		t.Fatalf("run on a claimed sandbox: %+v", out)
	}
	if end := release(t, h, s); end.Error != "" {
		t.Fatal(end.Error)
	}

	unused := spec("def run(input, config):\n    return 1", "null")
	if err := h.Claim(ctx, unused); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		held, err := d.List(ctx)
		if err == nil && len(held) == 1 && held[0] == unused.SandboxID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a claimed sandbox: %v %v", held, err)
		}
	}
	if err := h.Unclaim(ctx, unused.SandboxID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		held, err := d.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(held) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a cancelled claim left %v", held)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func run(t *testing.T, h *hostagent.Local, ctx context.Context, req hostagent.RunRequest) hostagent.RunResult {
	t.Helper()
	out, err := h.Run(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func release(t *testing.T, h *hostagent.Local, req hostagent.RunRequest) hostagent.Ending {
	t.Helper()
	end, err := h.Release(context.Background(), req.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	return end
}
