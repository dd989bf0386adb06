// Package remote serves a hostagent.Host over HTTP/2 (NewServer, run by `lbb host`) and
// speaks to one (Client, used by `lbb serve --host-agent`), so that the control plane and the
// host agent can live in different processes or on different machines. The Client answers
// exactly as the Host it reaches: the same results, errors of the same errdefs class and
// code, io.EOF at the end of an output stream.
//
// The protocol is private to this package (both ends are built from it):
//   - every call is POST /v1/<Method> with a bearer token, its arguments a JSON body and its
//     result a JSON answer; a failure answers {"class", "code", "message"} (wireError);
//   - WriteFile and WriteStdin stream the request body (their arguments in the query);
//   - OpenFile streams the answer, its FileEntry in the Lbb-File header, a failure while
//     streaming in the Lbb-Error trailer;
//   - ReadOutput answers the bytes raw, their start in Lbb-Start and the end in Lbb-EOF;
//     ReadHeld is a JSON call like the others (its pieces' bytes in base64), a long poll: the
//     host agent's hold drains only as fast as the control plane asks, so a reader that does
//     not keep up slows the process across the wire too;
//   - Events answers one JSON event a line for as long as the call lasts.
//
// Cleartext HTTP/2 (h2c) serves loopback only (NewClient refuses an http URL elsewhere, lbb
// host an address elsewhere without TLS); an https URL uses TLS, its certificate verified.
//
// A call's context ends as a message, not as a broken stream: every call carries an id
// (Lbb-Call), and when its context ends the client posts /v1/Cancel with it, which ends the
// context of the Host's call on the server; the call then answers what the Host answered
// (Run a killed run, Wait the context's error), as it would in process. A Cancel the server
// does not take within cancelAnswer, or a call it does not answer within cancelGrace after,
// has its stream reset: the caller's call ends within seconds whatever the host does.
//
// docs/architecture.md shows where a remote host fits.
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/errdefs"
)

// Headers and the trailer of the streamed calls.
const (
	headerCall  = "Lbb-Call"
	headerFile  = "Lbb-File"
	headerError = "Lbb-Error"
	headerStart = "Lbb-Start"
	headerEOF   = "Lbb-EOF"
)

// cancelGrace is how long a client waits, after the server took the Cancel of a call, for
// the server to answer the call (a Host's call answers at once when its context ends; a
// killed Run has its sandbox's usage to tell); cancelAnswer how long it waits for the Cancel
// to be taken. Past them the call's stream is reset, which ends the server's call as well.
const (
	cancelGrace  = 3 * time.Second
	cancelAnswer = 2 * time.Second
)

// wireError is an error on the wire. Context says the Host's call ended for its context
// ("canceled", "deadline"), so that errors.Is finds the context's error on the client too.
type wireError struct {
	Class   string `json:"class"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Context string `json:"context,omitempty"`
}

// writeError answers err. The status only tells a log or a curl what kind of failure it is;
// the client reads the class from the body.
func writeError(w http.ResponseWriter, err error) {
	status := http.StatusBadRequest
	switch errdefs.ClassOf(err) {
	case errdefs.ClassUnauthorized:
		status = http.StatusUnauthorized
	case errdefs.ClassInternal:
		status = http.StatusInternalServerError
	case errdefs.ClassUnavailable:
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, toWire(err))
}

func toWire(err error) wireError {
	w := wireError{Class: errdefs.ClassOf(err).String(), Code: errdefs.CodeOf(err), Message: err.Error()}
	switch {
	case errors.Is(err, context.Canceled):
		w.Context = "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		w.Context = "deadline"
	}
	return w
}

// err rebuilds the error of the same class and code (an unknown class is Internal), with the
// caller's context error when the Host's call ended for its context.
func (w wireError) err(ctx context.Context) error {
	class, _ := errdefs.ParseClass(w.Class)
	e := &errdefs.Error{Class: class, Code: w.Code, Msg: w.Message}
	if w.Context == "" {
		return e
	}
	cause := ctx.Err()
	if cause == nil && w.Context == "deadline" {
		cause = context.DeadlineExceeded
	} else if cause == nil {
		cause = context.Canceled
	}
	return contextError{e, cause}
}

// contextError is a Host's error that its context caused.
type contextError struct {
	err   *errdefs.Error
	cause error
}

func (e contextError) Error() string   { return e.err.Error() }
func (e contextError) Unwrap() []error { return []error{e.err, e.cause} }

// Argument structs of the calls that take more than one value.
type (
	idArgs struct {
		ID string `json:"id"`
	}
	snapshotArgs struct {
		ID         string `json:"id"`
		SnapshotID string `json:"snapshot_id"`
	}
	expiryArgs struct {
		ID string    `json:"id"`
		At time.Time `json:"at"`
	}
	grantArgs struct {
		ID    string        `json:"id"`
		Grant *egress.Grant `json:"grant"`
	}
	signalArgs struct {
		CommandID string `json:"command_id"`
		Signal    string `json:"signal"`
	}
	resizeArgs struct {
		CommandID string        `json:"command_id"`
		Size      agent.PtySize `json:"size"`
	}
	outputArgs struct {
		CommandID string `json:"command_id"`
		Stream    string `json:"stream"`
		Off       int64  `json:"off"`
		Max       int    `json:"max"`
	}
	fileArgs struct {
		SandboxID string `json:"sandbox_id"`
		Path      string `json:"path"`
		Recursive bool   `json:"recursive,omitempty"`
	}
	reapArgs struct {
		Keep []string `json:"keep"`
	}
)

// Flow control of the link. HTTP/2 gives a connection's credit back only as a stream's data
// is read, so a stream nobody reads keeps its whole window of the connection's: with Go's
// defaults (a stream 1 MiB of a connection's 256 MiB on the server, 4 MiB of 1 GiB on the
// client) some 256 streams left unread across every sandbox of a host (a preview's visitors
// that stopped reading, a command that never reads its stdin) stalled every call of that
// host. As on the guest agent's channel (agent.MaxStreams), each side's connection window is
// therefore maxStreams times its stream window: however many streams are left unread, the
// others keep their credit. The credit is not memory: a side buffers only what arrives and is
// not yet read, at most streamWindow a stream.
//
// streamWindow bounds one stream's throughput by window/RTT. Over loopback (a 2-core machine
// under load) one stream moved the same at 128 KiB, 256 KiB and 1 MiB windows: 1 GiB of
// stdout as the API reads it (ReadHeld, JSON) 31-48 MiB/s, a file down 111-207 MiB/s and up
// 165-350 MiB/s, the spread the load's, not the window's; at a datacenter's 0.5 ms, 128 KiB
// still carries 250 MiB/s. It is also what a side buffers of each unread stream: 200 unread
// port connections grew the heap of both ends together by 92 MiB at 128 KiB, 167 MiB at
// 256 KiB. Frames no larger than the window: the sending client holds a buffer of the
// server's frame size (up to 512 KiB) for each stream whose body it sends (every open port
// connection), for the stream's life.
const (
	maxStreams   = 1000
	streamWindow = 128 << 10
	connWindow   = maxStreams * streamWindow
	frameSize    = streamWindow
)

// NewHTTPServer is the http.Server for a host agent's handler: HTTP/2 in clear text (and
// HTTP/1 for a curl), over TLS when served so, with no read or write timeout since output
// follows and events last as long as their caller wants.
func NewHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:   h,
		Protocols: &p,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          maxStreams,
			MaxReadFrameSize:              frameSize,
			MaxReceiveBufferPerStream:     streamWindow,
			MaxReceiveBufferPerConnection: connWindow,
			SendPingTimeout:               30 * time.Second,
		},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
