package remote

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
)

// NewServer serves h to clients that present token (NewClient); an empty token lets no one
// in. Serve it with NewHTTPServer. log gets the calls that failed as Internal.
func NewServer(h hostagent.Host, token string, log *slog.Logger) http.Handler {
	s := &server{h: h, log: log, calls: map[string]context.CancelFunc{}, early: map[string]time.Time{}}
	mux := http.NewServeMux()
	handle := func(method string, fn http.HandlerFunc) { mux.HandleFunc("POST /v1/"+method, fn) }

	handle("Info", call(s, func(ctx context.Context, _ struct{}) (hostagent.Info, error) { return h.Info(ctx) }))
	// Claim's acquisition goes on after the call answers, which ends the call's context here
	// (in process the caller's context lasts until its Run or Unclaim).
	handle("Claim", call(s, none(func(ctx context.Context, req hostagent.RunRequest) error {
		return h.Claim(context.WithoutCancel(ctx), req)
	})))
	handle("Unclaim", call(s, none(func(ctx context.Context, a idArgs) error { return h.Unclaim(ctx, a.ID) })))
	handle("Run", call(s, h.Run))
	handle("Release", call(s, func(ctx context.Context, a idArgs) (hostagent.Ending, error) { return h.Release(ctx, a.ID) }))
	handle("Create", call(s, h.Create))
	handle("Resume", call(s, h.Resume))
	handle("Stop", call(s, func(ctx context.Context, a idArgs) (store.Usage, error) { return h.Stop(ctx, a.ID) }))
	handle("ArchiveWorkspace", call(s, func(ctx context.Context, a idArgs) (hostagent.Workspace, error) {
		return h.ArchiveWorkspace(ctx, a.ID)
	}))
	handle("Destroy", call(s, func(ctx context.Context, a idArgs) (store.Usage, error) { return h.Destroy(ctx, a.ID) }))
	handle("Pause", call(s, func(ctx context.Context, a idArgs) (hostagent.Paused, error) { return h.Pause(ctx, a.ID) }))
	handle("Snapshot", call(s, func(ctx context.Context, a snapshotArgs) (hostagent.SnapshotInfo, error) {
		return h.Snapshot(ctx, a.ID, a.SnapshotID)
	}))
	handle("DeleteSnapshot", call(s, none(func(ctx context.Context, a idArgs) error { return h.DeleteSnapshot(ctx, a.ID) })))
	handle("Fork", call(s, h.Fork))
	handle("Usage", call(s, func(ctx context.Context, a idArgs) (store.Usage, error) { return h.Usage(ctx, a.ID) }))
	handle("SetExpiry", call(s, none(func(ctx context.Context, a expiryArgs) error { return h.SetExpiry(ctx, a.ID, a.At) })))
	handle("SetGrant", call(s, none(func(ctx context.Context, a grantArgs) error { return h.SetGrant(ctx, a.ID, a.Grant) })))

	handle("Exec", call(s, none(h.Exec)))
	handle("Wait", call(s, func(ctx context.Context, a idArgs) (hostagent.CommandEnd, error) { return h.Wait(ctx, a.ID) }))
	handle("Signal", call(s, none(func(ctx context.Context, a signalArgs) error { return h.Signal(ctx, a.CommandID, a.Signal) })))
	handle("Resize", call(s, none(func(ctx context.Context, a resizeArgs) error { return h.Resize(ctx, a.CommandID, a.Size) })))
	handle("DialPort", s.dialPort)
	handle("WriteStdin", s.writeStdin)
	handle("ReadOutput", s.readOutput)
	handle("ReadHeld", call(s, h.ReadHeld))

	handle("WriteFile", s.writeFile)
	handle("OpenFile", s.openFile)
	handle("StatFile", call(s, func(ctx context.Context, a fileArgs) (hostagent.FileEntry, error) {
		return h.StatFile(ctx, a.SandboxID, a.Path)
	}))
	handle("ListFiles", call(s, func(ctx context.Context, a fileArgs) ([]hostagent.FileEntry, error) {
		return h.ListFiles(ctx, a.SandboxID, a.Path, a.Recursive)
	}))
	handle("RemoveFile", call(s, none(func(ctx context.Context, a fileArgs) error {
		return h.RemoveFile(ctx, a.SandboxID, a.Path, a.Recursive)
	})))
	handle("MakeDir", call(s, func(ctx context.Context, a fileArgs) (hostagent.FileEntry, error) {
		return h.MakeDir(ctx, a.SandboxID, a.Path)
	}))

	handle("Sandboxes", call(s, func(ctx context.Context, _ struct{}) ([]string, error) { return h.Sandboxes(ctx) }))
	handle("Reap", call(s, func(ctx context.Context, a reapArgs) ([]string, error) { return h.Reap(ctx, a.Keep) }))
	handle("Events", s.events)
	mux.HandleFunc("POST /v1/Cancel", s.cancel)
	return Authorize(token, s.cancellable(mux))
}

type server struct {
	h   hostagent.Host
	log *slog.Logger

	mu sync.Mutex
	// calls are the calls under way that can be cancelled, by id (Lbb-Call).
	calls map[string]context.CancelFunc
	// early are the ids of calls cancelled before they arrived, for a minute.
	early map[string]time.Time
}

// cancellable gives a call that has an id a context that its Cancel ends.
func (s *server) cancellable(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(headerCall)
		if id == "" {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		s.mu.Lock()
		if _, ok := s.early[id]; ok {
			delete(s.early, id)
			cancel()
		} else {
			s.calls[id] = cancel
		}
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.calls, id)
			s.mu.Unlock()
		}()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// cancel ends the context of a call under way, or of one still to come.
func (s *server) cancel(w http.ResponseWriter, r *http.Request) {
	var a idArgs
	if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
		s.fail(w, r, errdefs.InvalidArgument("host agent Cancel: arguments: %v", err))
		return
	}
	s.mu.Lock()
	if cancel, ok := s.calls[a.ID]; ok {
		cancel()
	} else {
		now := time.Now()
		for id, at := range s.early {
			if now.Sub(at) > time.Minute {
				delete(s.early, id)
			}
		}
		s.early[a.ID] = now
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, struct{}{})
}

// Authorize lets through the requests that carry the token, compared in constant time; an
// empty token lets no one in. The host agent's other routes (/metrics) go behind it too.
func Authorize(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			writeError(w, errdefs.Unauthorized("host agent: a wrong or no token"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// call serves a method whose arguments and result are JSON.
func call[A, R any](s *server, fn func(context.Context, A) (R, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var args A
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil && !errors.Is(err, io.EOF) {
			s.fail(w, r, errdefs.InvalidArgument("host agent %s: arguments: %v", r.URL.Path, err))
			return
		}
		res, err := fn(r.Context(), args)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// none adapts a method that answers only an error.
func none[A any](fn func(context.Context, A) error) func(context.Context, A) (struct{}, error) {
	return func(ctx context.Context, a A) (struct{}, error) { return struct{}{}, fn(ctx, a) }
}

func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errdefs.ClassOf(err) == errdefs.ClassInternal && r.Context().Err() == nil {
		s.log.Warn("host agent call failed", "call", r.URL.Path, "err", err)
	}
	writeError(w, err)
}

func (s *server) writeStdin(w http.ResponseWriter, r *http.Request) {
	closeIt, _ := strconv.ParseBool(r.URL.Query().Get("close"))
	res, err := s.h.WriteStdin(r.Context(), r.URL.Query().Get("command_id"), r.Body, closeIt)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// dialPort bridges the call to a connection to a port in a sandbox: the request body goes to
// it, what it sends is the answer.
func (s *server) dialPort(w http.ResponseWriter, r *http.Request) {
	// Before any answer, an error's too: an HTTP/1 server would otherwise read the request
	// body to its end (it never ends) before it answers.
	rc := http.NewResponseController(w)
	rc.EnableFullDuplex()
	q := r.URL.Query()
	port, err := strconv.Atoi(q.Get("port"))
	if err != nil {
		s.fail(w, r, errdefs.InvalidArgument("port must be a number"))
		return
	}
	conn, err := s.h.DialPort(r.Context(), q.Get("sandbox_id"), port)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer conn.Close()
	// The client's Close resets the stream: the connection in the sandbox ends with it, even
	// when nothing comes from the port to find out by.
	stop := context.AfterFunc(r.Context(), func() { conn.Close() })
	defer stop()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	go func() {
		if _, err := io.Copy(conn, r.Body); err != nil {
			conn.Close()
			return
		}
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil || rc.Flush() != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *server) writeFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fe, err := s.h.WriteFile(r.Context(), q.Get("sandbox_id"), q.Get("path"), r.Body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fe)
}

// openFile streams the file; a failure after the first byte travels in the trailer.
func (s *server) openFile(w http.ResponseWriter, r *http.Request) {
	var a fileArgs
	if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
		s.fail(w, r, errdefs.InvalidArgument("host agent OpenFile: arguments: %v", err))
		return
	}
	fe, rc, err := s.h.OpenFile(r.Context(), a.SandboxID, a.Path)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer rc.Close()
	stop := context.AfterFunc(r.Context(), func() { rc.Close() })
	defer stop()
	entry, _ := json.Marshal(fe)
	w.Header().Set(headerFile, string(entry))
	w.Header().Set("Trailer", headerError)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		// A failed read is the client's to know; after a failed write no one is listening.
		b, _ := json.Marshal(toWire(err))
		w.Header().Set(headerError, string(b))
	}
}

// readOutput answers the bytes raw: output is mostly text, sometimes not.
func (s *server) readOutput(w http.ResponseWriter, r *http.Request) {
	var a outputArgs
	if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
		s.fail(w, r, errdefs.InvalidArgument("host agent ReadOutput: arguments: %v", err))
		return
	}
	start, data, err := s.h.ReadOutput(r.Context(), a.CommandID, a.Stream, a.Off, a.Max)
	if err != nil && !errors.Is(err, io.EOF) {
		s.fail(w, r, err)
		return
	}
	w.Header().Set(headerStart, strconv.FormatInt(start, 10))
	if err != nil {
		w.Header().Set(headerEOF, "1")
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Write(data)
}

// events streams one JSON event a line, each flushed, until the caller or the host ends.
func (s *server) events(w http.ResponseWriter, r *http.Request) {
	ch, err := s.h.Events(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	enc := json.NewEncoder(w)
	for {
		select {
		case ev, ok := <-ch:
			if !ok || enc.Encode(ev) != nil || rc.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
