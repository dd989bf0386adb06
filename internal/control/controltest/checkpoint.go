package controltest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
)

// Checkpointing is the local driver with the optional abilities runtime.Freezer and
// runtime.Checkpointer, for tests of pause, snapshot and fork records, states and HTTP that
// run without root. It is a fake of what gvisor does, weaker in what matters for memory:
//   - Freeze and Thaw stop and continue the agent's process group (SIGSTOP, SIGCONT); the
//     agent answers nothing while frozen.
//   - Checkpoint stops the sandbox and keeps a copy of its directory (the workspace), but NOT
//     its memory: Restore starts a fresh agent on the copied workspace. Real memory is
//     tested end to end on gvisor (test/e2e/snapshot_test.go).
type Checkpointing struct {
	*local.Driver
	StateDir string

	mu      sync.Mutex
	started map[string]runtime.Sandbox
	// Checkpoints counts successful checkpoints, Restores restores.
	Checkpoints, Restores int
}

var (
	_ runtime.Freezer      = (*Checkpointing)(nil)
	_ runtime.Checkpointer = (*Checkpointing)(nil)
)

// NewCheckpointing wraps a local driver whose state directory is stateDir.
func NewCheckpointing(agentPath, stateDir string) *Checkpointing {
	return &Checkpointing{Driver: local.New(local.Options{AgentPath: agentPath, StateDir: stateDir}), StateDir: stateDir,
		started: map[string]runtime.Sandbox{}}
}

// Start starts the sandbox and remembers it (for Freeze).
func (d *Checkpointing) Start(ctx context.Context, id string) (runtime.Sandbox, error) {
	sb, err := d.Driver.Start(ctx, id)
	if err == nil {
		d.mu.Lock()
		d.started[id] = sb
		d.mu.Unlock()
	}
	return sb, err
}

func (d *Checkpointing) signal(id string, sig syscall.Signal) error {
	d.mu.Lock()
	sb := d.started[id]
	d.mu.Unlock()
	p, ok := sb.(interface{ InitPID() int })
	if sb == nil || !ok {
		return errdefs.Conflict("sandbox %s is not started here", id)
	}
	select {
	case <-sb.Done():
		return errdefs.Conflict("sandbox %s is not started here", id)
	default:
	}
	return syscall.Kill(-p.InitPID(), sig)
}

// Freeze stops the agent's process group.
func (d *Checkpointing) Freeze(ctx context.Context, id string) error {
	return d.signal(id, syscall.SIGSTOP)
}

// Thaw continues it.
func (d *Checkpointing) Thaw(ctx context.Context, id string) error {
	return d.signal(id, syscall.SIGCONT)
}

// Stop continues a frozen agent first, so that it can end.
func (d *Checkpointing) Stop(ctx context.Context, id string) error {
	_ = d.signal(id, syscall.SIGCONT)
	return d.Driver.Stop(ctx, id)
}

// Destroy continues a frozen agent first, so that it can end.
func (d *Checkpointing) Destroy(ctx context.Context, id string) error {
	_ = d.signal(id, syscall.SIGCONT)
	return d.Driver.Destroy(ctx, id)
}

// Checkpoint stops started sandbox id and copies its directory into dir/sandbox.
func (d *Checkpointing) Checkpoint(ctx context.Context, id, dir string) error {
	d.mu.Lock()
	sb := d.started[id]
	d.mu.Unlock()
	if sb == nil {
		return errdefs.Conflict("sandbox %s is not started here", id)
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		return errdefs.InvalidArgument("checkpoint directory %s is not empty", dir)
	}
	if err := d.Stop(ctx, id); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := copyDir(filepath.Join(d.StateDir, id), filepath.Join(dir, "sandbox")); err != nil {
		return err
	}
	d.mu.Lock()
	d.Checkpoints++
	d.mu.Unlock()
	return nil
}

// Restore starts id on the workspace kept in dir: the checkpointed sandbox, or a new one.
func (d *Checkpointing) Restore(ctx context.Context, id, dir string) (runtime.Sandbox, error) {
	src := filepath.Join(dir, "sandbox")
	if _, err := os.Stat(src); err != nil {
		return nil, errdefs.InvalidArgument("%s holds no checkpoint", dir)
	}
	target := filepath.Join(d.StateDir, id)
	if _, err := os.Stat(target); err == nil {
		if err := os.RemoveAll(filepath.Join(target, "workspace")); err != nil {
			return nil, err
		}
		if err := copyDir(filepath.Join(src, "workspace"), filepath.Join(target, "workspace")); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(d.StateDir, 0o700); err != nil {
		return nil, err // a host that made no sandbox yet
	} else if err := copyDir(src, target); err != nil {
		return nil, err
	}
	sb, err := d.Start(ctx, id)
	if err == nil {
		d.mu.Lock()
		d.Restores++
		d.mu.Unlock()
	}
	return sb, err
}

func copyDir(from, to string) error {
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		return fmt.Errorf("copying %s: %w: %s", from, err, out)
	}
	return nil
}
