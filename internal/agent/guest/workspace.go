package guest

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// Workspace resolves file paths inside the workspace directory. Every open goes through
// openat2(2) from a descriptor of the workspace with RESOLVE_BENEATH, so that neither "..",
// nor a symlink anywhere in the path (absolute, or relative and climbing out), nor a magic
// link in /proc can reach a file outside it; the kernel refuses with EXDEV, which is
// path_outside_workspace. A symlink inside that points inside is followed. An absolute
// symlink is refused even when it names a place in the workspace: beneath the workspace
// descriptor, "/" has no meaning.
type Workspace struct {
	// Path is where the workspace is on this machine ("/workspace" in a sandbox).
	Path string
	fd   int
}

// OpenWorkspace opens dir (made when missing) as the workspace.
func OpenWorkspace(dir string) (*Workspace, error) {
	dir = path.Clean(dir)
	if !path.IsAbs(dir) || dir == "/" {
		return nil, fmt.Errorf("workspace %q: must be an absolute directory other than /", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", dir, err)
	}
	// Make sure the kernel has openat2 and RESOLVE_BENEATH before anything relies on them.
	probe, err := unix.Openat2(fd, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveFlags})
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("workspace: openat2 unavailable (Linux 5.6 or later is needed): %w", err)
	}
	unix.Close(probe)
	return &Workspace{Path: dir, fd: fd}, nil
}

// Close releases the workspace descriptor.
func (w *Workspace) Close() error { return unix.Close(w.fd) }

const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// Rel maps a request path to a clean path relative to the workspace, "." for the workspace
// itself. It accepts relative paths and absolute ones under the workspace (either its real
// Path or /workspace, which is what clients say). It is lexical only: Open does the rest.
func (w *Workspace) Rel(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", &agent.Error{Code: agent.CodeInvalid, Message: "path contains a NUL byte"}
	}
	if p == "" {
		return ".", nil
	}
	if strings.HasPrefix(p, "/") {
		c := path.Clean(p)
		for _, root := range []string{w.Path, agent.Workspace} {
			if c == root {
				return ".", nil
			}
			if strings.HasPrefix(c, root+"/") {
				return c[len(root)+1:], nil
			}
		}
		return "", outside(p)
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", outside(p)
	}
	return c, nil
}

func outside(p string) error {
	return &agent.Error{Code: agent.CodePathOutside, Message: fmt.Sprintf("%q is outside %s", p, agent.Workspace)}
}

// openat2 opens rel beneath dirfd, retrying when a concurrent rename makes the kernel ask to.
func openat2(dirfd int, rel string, flags int, mode uint32) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolveFlags}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, rel, how)
		if (err == unix.EAGAIN || err == unix.EINTR) && i < 16 {
			continue
		}
		return fd, err
	}
}

// Open opens the clean relative path rel (from Rel) beneath the workspace.
func (w *Workspace) Open(rel string, flags int, mode uint32) (int, error) {
	fd, err := openat2(w.fd, rel, flags, mode)
	if err != nil {
		return -1, pathError(rel, err)
	}
	return fd, nil
}

// Resolve maps a request path to an open descriptor (flags, e.g. O_PATH|O_DIRECTORY) and
// its clean relative path.
func (w *Workspace) Resolve(p string, flags int) (fd int, rel string, err error) {
	rel, err = w.Rel(p)
	if err != nil {
		return -1, "", err
	}
	fd, err = w.Open(rel, flags, 0)
	return fd, rel, err
}

// resolveStat is Resolve that also answers what the descriptor names.
func (w *Workspace) resolveStat(p string, flags int) (int, string, *unix.Stat_t, error) {
	fd, rel, err := w.Resolve(p, flags)
	if err != nil {
		return -1, "", nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, "", nil, pathError(rel, err)
	}
	return fd, rel, &st, nil
}

// Display is how a relative path is shown in messages: under /workspace.
func Display(rel string) string {
	if rel == "." {
		return agent.Workspace
	}
	return agent.Workspace + "/" + rel
}

// errnoCodes are the protocol's codes for errnos, with a message when the errno's own is not
// clear enough.
var errnoCodes = map[unix.Errno]struct{ code, msg string }{
	unix.EXDEV:        {agent.CodePathOutside, "resolves outside " + agent.Workspace},
	unix.ELOOP:        {agent.CodeInvalid, "too many levels of symbolic links"},
	unix.ENOENT:       {agent.CodeNotFound, "no such file or directory"},
	unix.ENOTDIR:      {agent.CodeNotDir, "not a directory"},
	unix.EISDIR:       {agent.CodeIsDir, "is a directory"},
	unix.EEXIST:       {agent.CodeExists, "already exists"},
	unix.ENOTEMPTY:    {agent.CodeNotEmpty, "directory not empty"},
	unix.ENOSPC:       {agent.CodeDiskFull, "the workspace disk is full"},
	unix.EDQUOT:       {agent.CodeDiskFull, "the workspace disk is full"},
	unix.EACCES:       {code: agent.CodePermission},
	unix.EPERM:        {code: agent.CodePermission},
	unix.EROFS:        {code: agent.CodePermission},
	unix.ENAMETOOLONG: {code: agent.CodeInvalid},
	unix.EINVAL:       {code: agent.CodeInvalid},
}

// pathError turns an errno into the protocol's Error for the path rel.
func pathError(rel string, err error) error {
	var ae *agent.Error
	if errors.As(err, &ae) {
		return err
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return &agent.Error{Code: agent.CodeInternal, Message: fmt.Sprintf("%s: %v", Display(rel), err)}
	}
	code, msg := agent.CodeInternal, errno.Error()
	if c, ok := errnoCodes[errno]; ok {
		code, msg = c.code, cmp.Or(c.msg, msg)
	}
	return &agent.Error{Code: code, Message: Display(rel) + ": " + msg}
}

// mkdirAll makes rel and its missing parents beneath the workspace and returns an O_PATH
// descriptor of it. Each component is created with mkdirat in the directory that the
// previous step resolved beneath the workspace, and re-resolved from the workspace after,
// so that a symlink (even a dangling one) is never created through.
func (w *Workspace) mkdirAll(rel string) (int, error) {
	parent, err := w.Open(".", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil || rel == "." {
		return parent, err
	}
	comps := strings.Split(rel, "/")
	for i, name := range comps {
		p := strings.Join(comps[:i+1], "/")
		fd, err := openat2(w.fd, p, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err == unix.ENOENT {
			if err := unix.Mkdirat(parent, name, 0o755); err != nil && err != unix.EEXIST {
				unix.Close(parent)
				return -1, pathError(p, err)
			}
			fd, err = openat2(w.fd, p, unix.O_PATH|unix.O_DIRECTORY, 0)
		}
		unix.Close(parent)
		if err != nil {
			return -1, pathError(p, err)
		}
		parent = fd
	}
	return parent, nil
}

// parent resolves the request path p to its clean relative path, the directory holding it
// (an O_PATH descriptor; made with its parents when create) and its last component. p may
// not name the workspace itself: that answers the error whole.
func (w *Workspace) parent(p string, create bool, whole error) (pfd int, rel, base string, err error) {
	if rel, err = w.Rel(p); err != nil {
		return -1, "", "", err
	}
	if rel == "." {
		return -1, "", "", whole
	}
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	if create {
		pfd, err = w.mkdirAll(dir)
	} else {
		pfd, err = w.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	}
	return pfd, rel, base, err
}
