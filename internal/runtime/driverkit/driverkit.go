// Package driverkit holds what every runtime driver needs the same way: sandbox id checks,
// per-sandbox locks for the lifecycle calls, and the agent's log lines.
package driverkit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"sort"
	"sync"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
)

var (
	validID       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	validHostname = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$`)
)

// ValidID reports whether id can name a sandbox's state directory and cgroups.
func ValidID(id string) bool { return validID.MatchString(id) }

// StateDirs names the sandboxes that have a state directory under dir (sorted); a missing
// dir holds none.
func StateDirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && ValidID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// CheckID refuses an id that could not name a sandbox (a path, an empty string…).
func CheckID(id string) error {
	if !validID.MatchString(id) {
		return errdefs.InvalidArgument("sandbox id %q: want 1-64 letters, digits, _ or -", id)
	}
	return nil
}

// ValidHostname reports whether name can be a sandbox's hostname.
func ValidHostname(name string) bool { return validHostname.MatchString(name) }

// NotFound is the error for a sandbox id a driver holds nothing for.
func NotFound(id string) error {
	return errdefs.Wrap(errdefs.ClassNotFound, "", fmt.Errorf("%w: %s", runtime.ErrNotFound, id))
}

// Locks serializes the lifecycle calls of one sandbox; different sandboxes run in parallel.
// The zero value is ready.
type Locks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

// Lock takes id's lock and returns what releases it.
func (ls *Locks) Lock(id string) (unlock func()) {
	ls.mu.Lock()
	if ls.m == nil {
		ls.m = map[string]*idLock{}
	}
	l := ls.m[id]
	if l == nil {
		l = &idLock{}
		ls.m[id] = l
	}
	l.refs++
	ls.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		ls.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(ls.m, id)
		}
		ls.mu.Unlock()
	}
}

// LogAgent copies the agent's stdout and stderr to the logger, a line at a time, up to a
// budget: a sandbox could otherwise flood the host's log.
func LogAgent(log *slog.Logger, r io.ReadCloser) {
	defer r.Close()
	const budget = 1 << 20
	buf := make([]byte, 4096)
	var line []byte
	total := 0
	for {
		n, err := r.Read(buf)
		for _, c := range buf[:n] {
			if total > budget {
				break
			}
			if c == '\n' || len(line) >= 2048 {
				log.Info("agent", "line", string(line))
				total += len(line)
				line = line[:0]
				if total > budget {
					log.Warn("agent log budget exhausted; dropping the rest")
				}
				if c == '\n' {
					continue
				}
			}
			line = append(line, c)
		}
		if err != nil {
			if len(line) > 0 && total <= budget {
				log.Info("agent", "line", string(line))
			}
			return
		}
	}
}

// Spawn starts cmd from one OS thread that lives as long as the process: Pdeathsig fires when
// the thread that forked the child exits, and a caller's thread may exit (a goroutine that
// ends while locked to its thread takes the thread with it).
func Spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			goruntime.LockOSThread()
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnReqs <- spawnReq{cmd, done}
	return <-done
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

// AgentCopy is a driver's copy of the guest agent binary under its state directory, where
// the sandbox's ids can reach it whereas the binary itself may sit anywhere. The copy is
// named by its content, so a rebuilt agent gets a new one and a running sandbox keeps its
// own; the source is read again only when its size or mtime changes.
type AgentCopy struct {
	mu   sync.Mutex
	key  string // size and mtime of the source when it was copied
	path string
}

// Get answers the copy of src in dir, owned by uid with mode, making it when needed.
func (a *AgentCopy) Get(src, dir string, uid int, mode os.FileMode) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fi, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	key := fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
	if key == a.key {
		return a.path, nil
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	dst := filepath.Join(dir, "lbb-agent-"+hex.EncodeToString(sum[:])[:16])
	if err := WriteOnce(dst, b, uid, mode); err != nil {
		return "", fmt.Errorf("copy agent binary: %w", err)
	}
	a.key, a.path = key, dst
	return dst, nil
}

// WriteOnce writes b to path (owned by uid, with mode) unless it is there, atomically (a
// temporary file renamed); its directory is made traversable by the sandbox's ids (0711).
func WriteOnce(path string, b []byte, uid int, mode os.FileMode) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Lchown(tmp.Name(), uid, uid)
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), mode)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
