// Package driverkit holds what every runtime driver needs the same way: sandbox id checks,
// per-sandbox locks for the lifecycle calls, and the agent's log lines.
package driverkit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/keylock"
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
type Locks = keylock.Locks

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

// AgentCopy is a driver's copy of the guest agent binary under its state directory, where
// the sandbox's ids can reach it whereas the binary itself may sit anywhere. The copy is
// named by its content, so a rebuilt agent gets a new one and a running sandbox keeps its
// own; the source is read again only when its size or mtime changes, and an existing copy is
// used only when its bytes, owner and mode are what they should be (WriteOnce).
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

// WriteOnce writes b to path, owned by uid with mode, unless a file with exactly that content,
// owner and mode is there already; anything else there (a file changed since it was written,
// by whoever could) is replaced, atomically (a temporary file renamed). Its directory is
// made traversable by the sandbox's ids (0711).
func WriteOnce(path string, b []byte, uid int, mode os.FileMode) error {
	if same(path, b, uid, mode) {
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

// same reports whether path is a regular file holding b, owned by uid, with mode.
func same(path string, b []byte, uid int, mode os.FileMode) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != mode || fi.Size() != int64(len(b)) {
		return false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != uid || int(st.Gid) != uid {
		return false
	}
	have, err := os.ReadFile(path)
	return err == nil && bytes.Equal(have, b)
}

// Tail keeps the last bytes read through it: what a process printed just before it ended,
// for the error that says it ended. Done is closed once its reader has ended.
type Tail struct {
	r    io.ReadCloser
	max  int
	mu   sync.Mutex
	buf  []byte
	done chan struct{}
	once sync.Once
}

// NewTail reads r, keeping its last max bytes.
func NewTail(r io.ReadCloser, max int) *Tail {
	return &Tail{r: r, max: max, done: make(chan struct{})}
}

func (t *Tail) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.mu.Lock()
	t.buf = append(t.buf, p[:n]...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.mu.Unlock()
	if err != nil {
		t.once.Do(func() { close(t.done) })
	}
	return n, err
}

// Close closes the reader.
func (t *Tail) Close() error { return t.r.Close() }

// Last answers the bytes kept, waiting up to wait for the reader to end first.
func (t *Tail) Last(wait time.Duration) string {
	select {
	case <-t.done:
	case <-time.After(wait):
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
