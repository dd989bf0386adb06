//go:build linux

package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// runscRoot is runsc's state directory (--root): one entry per started sandbox.
func (d *Driver) runscRoot() string { return filepath.Join(d.cfg.StateDir, ".runsc") }

// globalFlags are runsc's flags for every command on a sandbox: runsc reads the sandbox's
// configuration again on each, and they must agree.
func (d *Driver) globalFlags(id string) []string {
	f := []string{
		"--root=" + d.runscRoot(),
		"--platform=" + d.cfg.Platform,
		// Only lo inside; no device, no route out.
		"--network=none",
		// The image is the read-only root; nothing overlays it (the default, root:self,
		// would keep a filestore in the image's directory).
		"--overlay2=none",
		// The agent connects to its host's socket in /.lbb/chan (see the package doc).
		"--host-uds=open",
		// The Sentry opens no host file itself; the gofer does, and hands it over. With
		// directfs (the default), the Sentry would hold host directories open and need
		// wider host system calls.
		"--directfs=false",
		// The default (null) bind-mounts one namespace under --root for all gofers, which
		// stays mounted after the last sandbox.
		"--gofer-network-namespace=new",
		// A fork is restored with its own host ids (its user namespace's mapping differs from
		// the checkpoint's): runsc then logs the difference instead of refusing. The Sentry
		// keeps no host ids (only the gofer, which runs with the new mapping, uses them).
		"--restore-spec-validation=warning",
	}
	if d.cfg.DebugLogDir != "" {
		// SIGUSR2 makes the Sentry panic with every goroutine's stack in its log: the way
		// to see what a hung sandbox waits on.
		f = append(f, "--debug", "--debug-log="+filepath.Join(d.cfg.DebugLogDir, id)+"/", "--panic-signal=12")
	}
	return f
}

// runscCmd is a runsc command on sandbox id. Its stdio is /dev/null unless the caller sets it:
// runsc hands its stdio to what it starts, and a pipe held open that way never ends.
func (d *Driver) runscCmd(id string, args ...string) *exec.Cmd {
	cmd := exec.Command(d.cfg.Runsc, append(d.globalFlags(id), args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	return cmd
}

// runsc runs a runsc command to its end and answers its output.
func (d *Driver) runsc(ctx context.Context, id string, args ...string) ([]byte, error) {
	cmd := d.runscCmd(id, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return bytes.TrimSpace(out.Bytes()), err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return bytes.TrimSpace(out.Bytes()), ctx.Err()
	}
}

// hasRunscState reports whether runsc holds state for sandbox id.
func (d *Driver) hasRunscState(id string) bool {
	for _, name := range []string{id + "_sandbox:" + id + ".state", id + "_sandbox:" + id + ".lock", "runsc-" + id + ".sock"} {
		if _, err := os.Lstat(filepath.Join(d.runscRoot(), name)); err == nil {
			return true
		}
	}
	return false
}

// removeOrphanRunscFiles removes what a runsc killed before it wrote the sandbox's state
// leaves of it (its lock, the Sentry's control socket), which runsc delete, finding no state,
// leaves too. The caller made sure no process of the sandbox runs.
func (d *Driver) removeOrphanRunscFiles(id string) error {
	if _, err := os.Lstat(filepath.Join(d.runscRoot(), id+"_sandbox:"+id+".state")); err == nil {
		return nil
	}
	var errs []error
	for _, name := range []string{id + "_sandbox:" + id + ".lock", "runsc-" + id + ".sock"} {
		if err := os.Remove(filepath.Join(d.runscRoot(), name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// runscEvents is what `runsc events --stats` says, the part the driver reads.
type runscEvents struct {
	Data struct {
		Pids struct {
			Current uint64 `json:"current"`
		} `json:"pids"`
	} `json:"data"`
}

func (d *Driver) events(ctx context.Context, id string) (runscEvents, error) {
	var ev runscEvents
	out, err := d.runsc(ctx, id, "events", "--stats", id)
	if err != nil {
		return ev, fmt.Errorf("runsc events: %w: %s", err, out)
	}
	if err := json.Unmarshal(out, &ev); err != nil {
		return ev, fmt.Errorf("runsc events: %w: %s", err, out)
	}
	return ev, nil
}

// runscProcess is a line of `runsc ps` (whose JSON format has the pids only).
type runscProcess struct {
	PID, PPID int
	C         int // CPU use, percent
	Cmd       string
}

func (d *Driver) ps(ctx context.Context, id string) ([]runscProcess, error) {
	out, err := d.runsc(ctx, id, "ps", id)
	if err != nil {
		return nil, fmt.Errorf("runsc ps: %w: %s", err, out)
	}
	return parsePS(string(out))
}

// parsePS parses the table of `runsc ps`: UID PID PPID PGID C TTY STIME TIME CMD.
func parsePS(out string) ([]runscProcess, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "UID") {
		return nil, fmt.Errorf("runsc ps: unexpected output %q", out)
	}
	var ps []runscProcess
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) < 9 {
			continue
		}
		var p runscProcess
		var err1, err2, err3 error
		p.PID, err1 = strconv.Atoi(f[1])
		p.PPID, err2 = strconv.Atoi(f[2])
		p.C, err3 = strconv.Atoi(f[4])
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("runsc ps: %q: %w", line, err)
		}
		p.Cmd = strings.Join(f[8:], " ")
		ps = append(ps, p)
	}
	return ps, nil
}

// errExited is returned while waiting for an agent whose sandbox has ended.
var errExited = errors.New("the sandbox exited before its agent connected")

// pollInterval is how often a waiting step looks again.
const pollInterval = 5 * time.Millisecond
