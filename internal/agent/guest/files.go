package guest

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// copyBufSize is the buffer for streaming file contents; larger than a pipe or an HTTP/2
// frame so that each syscall moves a lot.
const copyBufSize = 1 << 20

var copyPool = sync.Pool{New: func() any {
	b := make([]byte, copyBufSize)
	return &b
}}

// copyFile copies with a pooled buffer, as plain Reader and Writer: os.File's WriteTo and
// ReadFrom would move 32 KiB at a time.
func copyFile(w io.Writer, r io.Reader) (int64, error) {
	bp := copyPool.Get().(*[]byte)
	n, err := io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r}, *bp)
	if err == nil { // after a failed write, the connection may still be sending from it
		copyPool.Put(bp)
	}
	return n, err
}

// fileTypes are the protocol's names of file types; any other is agent.TypeOther.
var fileTypes = map[uint32]string{unix.S_IFREG: agent.TypeFile, unix.S_IFDIR: agent.TypeDir, unix.S_IFLNK: agent.TypeSymlink}

// entryOf describes the file st named rel.
func entryOf(rel string, st *unix.Stat_t) agent.FileEntry {
	t := cmp.Or(fileTypes[st.Mode&unix.S_IFMT], agent.TypeOther)
	name := path.Base(rel)
	if rel == "." {
		name = path.Base(agent.Workspace)
	}
	return agent.FileEntry{
		Path:  rel,
		Name:  name,
		Type:  t,
		Size:  st.Size,
		Mode:  fmt.Sprintf("%04o", st.Mode&0o7777),
		MTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC().Format(time.RFC3339),
	}
}

// handleList answers a listing: the entries of a directory (recursive=1: of everything
// beneath it, never following symlinks), or the one entry of a path that is not a directory.
// Entries are streamed as a JSON array, so a huge tree costs the agent one directory's names.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	recursive := isTrue(q.Get("recursive"))
	fd, rel, st, err := s.ws.resolveStat(q.Get("path"), unix.O_PATH)
	if err != nil {
		writeError(w, err)
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		writeJSON(w, http.StatusOK, []agent.FileEntry{entryOf(rel, st)})
		return
	}
	// Reopen for reading: O_PATH descriptors cannot list.
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	unix.Close(fd)
	if err != nil {
		writeError(w, pathError(rel, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	l := &lister{w: w, enc: json.NewEncoder(w)}
	io.WriteString(w, "[")
	err = l.list(dfd, rel, recursive)
	io.WriteString(w, "]\n")
	if err != nil {
		// The status is sent: cut the stream so that the client sees an error, not a short list.
		s.log.Warn("list failed midway", "path", rel, "err", err)
		panic(http.ErrAbortHandler)
	}
}

type lister struct {
	w   io.Writer
	enc *json.Encoder
	n   int
}

// list writes the entries of the directory dfd (named rel), and closes dfd.
func (l *lister) list(dfd int, rel string, recursive bool) error {
	f := os.NewFile(uintptr(dfd), rel)
	names, err := f.Readdirnames(-1)
	if err != nil {
		f.Close()
		return err
	}
	defer f.Close()
	slices.Sort(names)
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT {
				continue // removed while listing
			}
			return err
		}
		child := name
		if rel != "." {
			child = rel + "/" + name
		}
		if l.n > 0 {
			io.WriteString(l.w, ",")
		}
		l.n++
		if err := l.enc.Encode(entryOf(child, &st)); err != nil {
			return err
		}
		if recursive && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			// One component and O_NOFOLLOW: a directory swapped for a symlink is not followed.
			cfd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP || err == unix.EACCES {
					continue
				}
				return err
			}
			if err := l.list(cfd, child, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// handleRead streams a file's bytes.
func (s *Server) handleRead(w http.ResponseWriter, r *http.Request) {
	// O_NONBLOCK so that opening a FIFO does not wait for a writer; it is refused below.
	fd, rel, st, err := s.ws.resolveStat(r.URL.Query().Get("path"), unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		writeError(w, err)
		return
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		unix.Close(fd)
		writeError(w, pathError(rel, unix.EISDIR))
		return
	default:
		unix.Close(fd)
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: Display(rel) + ": not a regular file"})
		return
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(st.Size, 10))
	h.Set("Lbb-Mode", fmt.Sprintf("%04o", st.Mode&0o7777))
	w.WriteHeader(http.StatusOK)
	// Exactly the size announced: what a writer appends meanwhile is not sent, and a file
	// that shrank breaks the stream off rather than ending it short.
	if n, err := copyFile(w, io.LimitReader(f, st.Size)); err != nil || n != st.Size {
		panic(http.ErrAbortHandler)
	}
}

// handleWrite streams the body into a temporary file beside the target, then renames it over
// the target, so that readers see the old or the new content and never a part.
func (s *Server) handleWrite(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	mode, keepMode := uint32(0o644), true
	if m := q.Get("mode"); m != "" {
		keepMode = false
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o777 {
			writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: fmt.Sprintf("mode %q: want octal permission bits such as 0644", m)})
			return
		}
		mode = uint32(v)
	}
	pfd, rel, base, err := s.ws.parent(q.Get("path"), true, pathError(".", unix.EISDIR))
	if err != nil {
		writeError(w, err)
		return
	}
	defer unix.Close(pfd)
	var old unix.Stat_t
	if keepMode && unix.Fstatat(pfd, base, &old, unix.AT_SYMLINK_NOFOLLOW) == nil && old.Mode&unix.S_IFMT == unix.S_IFREG {
		mode = old.Mode & 0o777 // overwriting keeps the mode unless one is given
	}
	entry, err := writeAt(pfd, base, mode, r.Body)
	if err != nil {
		writeError(w, pathError(rel, err))
		return
	}
	entry.Path, entry.Name = rel, base
	s.syncWorkspace()
	writeJSON(w, http.StatusOK, entry)
}

// writeAt writes the file name in the directory pfd from r, through a temporary file.
func writeAt(pfd int, name string, mode uint32, r io.Reader) (agent.FileEntry, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := ".lbb-upload-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return agent.FileEntry{}, err
	}
	f := os.NewFile(uintptr(fd), tmp)
	fail := func(err error) (agent.FileEntry, error) {
		f.Close()
		unix.Unlinkat(pfd, tmp, 0)
		return agent.FileEntry{}, err
	}
	if _, err := copyFile(f, r); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fail(pe.Err)
		}
		return fail(&agent.Error{Code: agent.CodeInvalid, Message: "reading the upload: " + err.Error()})
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fail(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return agent.FileEntry{}, err
	}
	if err := unix.Renameat(pfd, tmp, pfd, name); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		if err == unix.EEXIST || err == unix.ENOTEMPTY {
			err = unix.EISDIR
		}
		return agent.FileEntry{}, err
	}
	return entryOf(name, &st), nil
}

// handleDelete removes a file, a symlink (never what it points to) or a directory
// (recursive=1 when it is not empty).
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	pfd, rel, base, err := s.ws.parent(q.Get("path"), false, &agent.Error{Code: agent.CodeInvalid, Message: "the workspace itself cannot be deleted"})
	if err != nil {
		writeError(w, err)
		return
	}
	defer unix.Close(pfd)
	err = unix.Unlinkat(pfd, base, 0)
	if err == unix.EISDIR {
		if isTrue(q.Get("recursive")) {
			err = removeAllAt(pfd, base)
		} else {
			err = unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
		}
	}
	if err != nil {
		writeError(w, pathError(rel, err))
		return
	}
	s.syncWorkspace()
	w.WriteHeader(http.StatusNoContent)
}

// removeAllAt removes the directory name in pfd and everything beneath it, never following
// a symlink.
func removeAllAt(pfd int, name string) error {
	for {
		dfd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(dfd), name)
		names, err := f.Readdirnames(-1)
		if err != nil {
			f.Close()
			return err
		}
		for _, n := range names {
			err := unix.Unlinkat(dfd, n, 0)
			if err == unix.EISDIR {
				err = removeAllAt(dfd, n)
			}
			if err != nil && err != unix.ENOENT {
				f.Close()
				return err
			}
		}
		f.Close()
		err = unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
		if err != unix.ENOTEMPTY {
			return err
		}
		// Something was created meanwhile: go again.
	}
}

// handleMkdir makes a directory and its parents.
func (s *Server) handleMkdir(w http.ResponseWriter, r *http.Request) {
	rel, err := s.ws.Rel(r.URL.Query().Get("path"))
	if err != nil {
		writeError(w, err)
		return
	}
	fd, err := s.ws.mkdirAll(rel)
	if err != nil {
		writeError(w, err)
		return
	}
	unix.Close(fd)
	s.syncWorkspace()
	w.WriteHeader(http.StatusNoContent)
}

func isTrue(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// writeError answers err as an agent.Error.
func writeError(w http.ResponseWriter, err error) {
	var ae *agent.Error
	if !errors.As(err, &ae) {
		ae = &agent.Error{Code: agent.CodeInternal, Message: err.Error()}
	}
	writeJSON(w, agent.StatusOf(ae.Code), ae)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
