package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/littlebigbrain/lbb/internal/control"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/store"
)

// GET /v1/commands/{id}/output is a text/event-stream:
//
//	id: 12.0
//	event: stdout
//	data: {"stream":"stdout","offset":0,"data":"line1\n"}
//
//	event: exit
//	data: {…the command record…}
//
// A chunk's offset is where its bytes start in their stream; a gap between chunks is output
// that was not kept (between the head and the tail of a long output). data is the bytes as
// text; when they are not valid UTF-8 a "base64" field carries them exactly. A chunk never
// ends inside a UTF-8 sequence that continues in the next. The id is the offset reached in
// stdout and in stderr: a reconnect sending it as Last-Event-ID resumes after it. With
// follow=true the stream goes on until the command ends, then sends an exit event with its
// record; without, it ends after what is there now (with the exit event if the command has
// ended). Comments (": keepalive") keep idle connections open.

// ssePing is how often an idle stream sends a comment.
const ssePing = 15 * time.Second

// sseChunk is the data of a stdout or stderr event.
type sseChunk struct {
	Stream string `json:"stream"`
	Offset int64  `json:"offset"`
	Data   string `json:"data"`
	Base64 string `json:"base64,omitempty"`
}

type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
	// next is the offset reached in each stream.
	next map[string]int64
	// held is the start of a UTF-8 sequence whose rest is in the next chunk.
	held map[string][]byte
}

func (sw *sseWriter) event(name, id string, data []byte) {
	if sw.err != nil {
		return
	}
	var b strings.Builder
	if id != "" {
		fmt.Fprintf(&b, "id: %s\n", id)
	}
	fmt.Fprintf(&b, "event: %s\n", name)
	for _, line := range strings.Split(string(data), "\n") {
		fmt.Fprintf(&b, "data: %s\n", line)
	}
	b.WriteString("\n")
	if _, err := io.WriteString(sw.w, b.String()); err != nil {
		sw.err = err
		return
	}
	sw.err = sw.rc.Flush()
}

func (sw *sseWriter) comment(text string) {
	if sw.err != nil {
		return
	}
	if _, err := io.WriteString(sw.w, ": "+text+"\n\n"); err != nil {
		sw.err = err
		return
	}
	sw.err = sw.rc.Flush()
}

func (sw *sseWriter) id() string {
	return strconv.FormatInt(sw.next["stdout"], 10) + "." + strconv.FormatInt(sw.next["stderr"], 10)
}

// chunk sends bytes of a stream that start at off; final says no more bytes follow.
func (sw *sseWriter) chunk(stream string, off int64, data []byte, final bool) {
	if h := sw.held[stream]; len(h) > 0 {
		sw.held[stream] = nil
		if off == sw.next[stream]+int64(len(h)) {
			data, off = append(append([]byte(nil), h...), data...), sw.next[stream]
		}
	}
	if !final {
		if cut := incompleteTail(data); cut > 0 {
			sw.held[stream] = append([]byte(nil), data[len(data)-cut:]...)
			data = data[:len(data)-cut]
		}
	}
	if len(data) == 0 {
		sw.next[stream] = off
		return
	}
	sw.emit(stream, off, data)
}

func (sw *sseWriter) emit(stream string, off int64, data []byte) {
	c := sseChunk{Stream: stream, Offset: off, Data: string(data)}
	if !utf8.Valid(data) {
		c.Base64 = base64.StdEncoding.EncodeToString(data)
		c.Data = strings.ToValidUTF8(c.Data, "\uFFFD")
	}
	b := marshalNoEscape(c)
	sw.next[stream] = off + int64(len(data))
	sw.event(stream, sw.id(), b)
}

// flushHeld sends what is held back at the end of a stream.
func (sw *sseWriter) flushHeld(stream string) {
	if h := sw.held[stream]; len(h) > 0 {
		sw.held[stream] = nil
		sw.emit(stream, sw.next[stream], h)
	}
}

// incompleteTail is how many bytes at the end of b begin a UTF-8 sequence that b cuts off.
func incompleteTail(b []byte) int {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf {
			return 0
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return i
			}
			return 0
		}
	}
	return 0
}

func parseLastEventID(v string) (int64, int64) {
	a, b, ok := strings.Cut(v, ".")
	if !ok {
		return 0, 0
	}
	x, err1 := strconv.ParseInt(a, 10, 64)
	y, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || x < 0 || y < 0 {
		return 0, 0
	}
	return x, y
}

// newSSE starts a text/event-stream answer: the headers go at once (a client may wait for
// them before it feeds the command), and Last-Event-ID says where each stream resumes.
func newSSE(w http.ResponseWriter, r *http.Request) *sseWriter {
	noDeadlines(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), next: map[string]int64{}, held: map[string][]byte{}}
	sw.err = sw.rc.Flush()
	sw.next["stdout"], sw.next["stderr"] = parseLastEventID(r.Header.Get("Last-Event-ID"))
	return sw
}

func (s *Server) commandOutput(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	streams := []string{"stdout", "stderr"}
	switch q.Get("stream") {
	case "", "both":
	case "stdout":
		streams = []string{"stdout"}
	case "stderr":
		streams = []string{"stderr"}
	default:
		return errdefs.InvalidArgument("stream must be stdout, stderr or both")
	}
	follow, err := boolParam(r, "follow")
	if err != nil {
		return err
	}
	release, err := s.streams.acquire(c.caller.Key.ID)
	if err != nil {
		return err
	}
	defer release()
	id := r.PathValue("id")
	out, err := s.svc.CommandOutput(r.Context(), c.caller.Graph, id)
	if err != nil {
		return err
	}
	s.sendOutput(r.Context(), newSSE(w, r), c, out, streams, follow, false)
	return nil
}

// streamStarted answers a command started with stream: an event command with its record,
// then its output, held for this caller from the first byte, then its exit. When this caller
// goes away, and no other resumes the stream within heldGrace, the hold is let go, so that
// the process does not wait for nobody. A replayed start (the same Idempotency-Key) streams
// the same command from Last-Event-ID.
func (s *Server) streamStarted(w http.ResponseWriter, r *http.Request, c *call, resp control.Response) {
	var cmd store.Command
	if err := json.Unmarshal(resp.Body, &cmd); err != nil {
		s.writeError(w, c, fmt.Errorf("reading the started command: %w", err))
		return
	}
	c.target = cmd.ID
	if resp.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	ctx := r.Context()
	defer s.held.attach(cmd.ID)()
	sw := newSSE(w, r)
	sw.event("command", "", marshalNoEscape(cmd))
	out, err := s.svc.CommandOutput(ctx, c.caller.Graph, cmd.ID)
	if err != nil {
		s.errorEvent(sw, c, err)
		return
	}
	s.sendOutput(ctx, sw, c, out, []string{"stdout", "stderr"}, true, true)
}

// sendOutput sends a command's output from sw's offsets on: held for this caller (held),
// else live from what is kept, else (ended, or a one-call run) what its record kept; with
// follow, until it ends, then its exit.
func (s *Server) sendOutput(ctx context.Context, sw *sseWriter, c *call, out control.CommandOutput, streams []string, follow, held bool) {
	id := out.Command.ID
	// Held output is read to its end also when the command ended meanwhile: its last bytes
	// wait in the hold after the record has its end.
	if held && s.followHeld(ctx, sw, id) {
		s.sendExit(ctx, sw, c, id, streams, out.Done)
		return
	}
	if out.Live {
		s.followLive(ctx, sw, streams, id, follow)
		if follow {
			s.sendExit(ctx, sw, c, id, streams, out.Done)
		} else if cmd, err := s.svc.Store().GetCommand(ctx, c.caller.Graph, id); err == nil && store.CommandDone(cmd.Status) {
			s.exitEvent(sw, cmd)
		}
		return
	}
	// Not followed live here (ended, or a one-call run): what the record kept; with follow,
	// the rest once it ends.
	cmd := out.Command
	if held { // it ended while the hold was read: the record is the newer
		if rec, err := s.svc.Store().GetCommand(ctx, c.caller.Graph, id); err == nil {
			cmd = rec
		}
	}
	s.recordChunks(sw, streams, cmd)
	if !store.CommandDone(cmd.Status) && follow {
		s.sendExit(ctx, sw, c, id, streams, nil)
		return
	}
	if store.CommandDone(cmd.Status) {
		s.exitEvent(sw, cmd)
	}
}

// sendExit waits for the command's end (done, when it runs here) and sends its exit event
// with its record. Without done it waits for the record, the kept output of which it sends.
func (s *Server) sendExit(ctx context.Context, sw *sseWriter, c *call, id string, streams []string, done <-chan struct{}) {
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
	}
	cmd, err := s.svc.Store().GetCommand(ctx, c.caller.Graph, id)
	for err == nil && !store.CommandDone(cmd.Status) && sw.err == nil {
		if cmd, err = s.svc.GetCommand(ctx, c.caller.Graph, id, ssePing); err == nil && !store.CommandDone(cmd.Status) {
			sw.comment("keepalive")
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			s.errorEvent(sw, c, err)
		}
		return
	}
	if done == nil {
		s.recordChunks(sw, streams, cmd)
	}
	s.exitEvent(sw, cmd)
}

// heldRead is the most one read of held output takes.
const heldRead = 256 << 10

// followHeld sends a command's held output (control.Service.ReadHeld) in the order the
// process wrote it, taking from the hold only what was written to this answer. It reports
// whether it sent the whole output; when not (the hold was let go, or there is none), what
// follows comes from what is kept.
func (s *Server) followHeld(ctx context.Context, sw *sseWriter, id string) bool {
	taken := map[string]int64{"stdout": sw.next["stdout"], "stderr": sw.next["stderr"]}
	for sw.err == nil {
		rctx, cancel := context.WithTimeout(ctx, ssePing)
		h, err := s.svc.ReadHeld(rctx, id, taken["stdout"], taken["stderr"], heldRead)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			sw.comment("keepalive")
			continue
		case err != nil:
			return false
		}
		for _, p := range h.Pieces {
			sw.chunk(p.Stream, p.Offset, p.Data, false)
			taken[p.Stream] = p.Offset + int64(len(p.Data))
		}
		if h.Ended {
			sw.flushHeld("stdout")
			sw.flushHeld("stderr")
			return true
		}
		if h.Released {
			return false
		}
	}
	return false
}

// recordChunks sends what a command record kept of each stream past what was sent.
func (s *Server) recordChunks(sw *sseWriter, streams []string, cmd store.Command) {
	for _, st := range streams {
		o := cmd.Stdout
		if st == "stderr" {
			o = cmd.Stderr
		}
		from := sw.next[st]
		if from < int64(len(o.Head)) {
			sw.chunk(st, from, []byte(o.Head[from:]), true)
		}
		tailStart := o.Bytes - int64(len(o.Tail))
		from = max(sw.next[st], int64(len(o.Head)), tailStart)
		if from < o.Bytes && from-tailStart < int64(len(o.Tail)) {
			sw.chunk(st, from, []byte(o.Tail[from-tailStart:]), true)
		}
	}
}

// followLive sends a running command's output (control.Service.ReadOutput): until each
// stream ends with follow, else what is there now.
func (s *Server) followLive(ctx context.Context, sw *sseWriter, streams []string, commandID string, follow bool) {
	type piece struct {
		stream string
		off    int64
		data   []byte
		end    bool
	}
	ch := make(chan piece, 16)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	max := 64 << 10
	if !follow {
		max = -1 // what is there now, without waiting
	}
	for _, st := range streams {
		off := sw.next[st]
		go func() {
			for {
				start, data, err := s.svc.ReadOutput(fctx, commandID, st, off, max)
				if err != nil || !follow && len(data) == 0 {
					select {
					case ch <- piece{stream: st, end: true}:
					case <-fctx.Done():
					}
					return
				}
				select {
				case ch <- piece{stream: st, off: start, data: data}:
				case <-fctx.Done():
					return
				}
				off = start + int64(len(data))
			}
		}()
	}
	ping := time.NewTicker(ssePing)
	defer ping.Stop()
	open := len(streams)
	for open > 0 && sw.err == nil {
		select {
		case p := <-ch:
			if p.end {
				sw.flushHeld(p.stream)
				open--
				continue
			}
			sw.chunk(p.stream, p.off, p.data, false)
		case <-ping.C:
			sw.comment("keepalive")
		case <-ctx.Done():
			return
		}
	}
}

func (s *Server) exitEvent(sw *sseWriter, cmd store.Command) {
	for _, st := range []string{"stdout", "stderr"} {
		sw.flushHeld(st)
	}
	sw.event("exit", "", marshalNoEscape(cmd))
}

func (s *Server) errorEvent(sw *sseWriter, c *call, err error) {
	var b errorBody
	b.Error.Code, b.Error.Message, b.Error.RequestID = errdefs.CodeOf(err), err.Error(), c.requestID
	sw.event("error", "", marshalNoEscape(b))
}

// marshalNoEscape is JSON on one line, with <, > and & as they are.
func marshalNoEscape(v any) []byte {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return []byte(strings.TrimSuffix(b.String(), "\n"))
}
