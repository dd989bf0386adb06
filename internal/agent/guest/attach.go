package guest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// Detachable process streams (ExecRequest.Detachable): a long-lived command's stream outlives
// the channel it began on. When the channel ends (a gvisor sandbox checkpointed and restored
// for a snapshot), the process is not killed: its output waits, and a new stream on the next
// channel (POST /v1/procs/{id}/attach) takes it on from the offsets the host has, the bytes
// the old channel may have lost sent again from a window of the last ones written. Nobody
// attaching within attachWait ends it, killed.

const (
	attachWait = 2 * time.Minute
	// replayMax is how much of each stream is kept for an attach to send again: as much as
	// the channel can have in flight (the host's window per stream, agent.Client's 4 MiB).
	// It is kept only as a command writes that much.
	replayMax = 4 << 20
)

var errDetached = errors.New("the stream's channel ended; waiting for an attach")

// attachables are the detachable streams running, by process id.
var attachables = struct {
	sync.Mutex
	m map[string]*attachable
}{m: map[string]*attachable{}}

type attachable struct {
	pid  int
	fw   *frameWriter
	inW  *os.File // nil without stdin
	done chan struct{}
	kill func()
}

func addAttachable(id string, a *attachable) {
	attachables.Lock()
	attachables.m[id] = a
	attachables.Unlock()
}

func removeAttachable(id string, a *attachable) {
	attachables.Lock()
	if attachables.m[id] == a {
		delete(attachables.m, id)
	}
	attachables.Unlock()
}

func isAttachable(pid int) bool {
	attachables.Lock()
	defer attachables.Unlock()
	for _, a := range attachables.m {
		if a.pid == pid {
			return true
		}
	}
	return false
}

// lost is called when the stream of generation gen lost its channel: writes wait for an
// attach, and nobody attaching within attachWait kills the process.
func (a *attachable) lost(gen int) {
	fw := a.fw
	fw.mu.Lock()
	if fw.gen == gen && fw.err == nil {
		fw.err = errDetached
	}
	fw.mu.Unlock()
	go func() {
		select {
		case <-a.done:
			return
		case <-time.After(attachWait):
		}
		fw.mu.Lock()
		same := fw.gen == gen
		if same {
			fw.gaveUp = true
			fw.cond.Broadcast()
		}
		fw.mu.Unlock()
		if same {
			a.kill()
		}
	}()
}

// record notes a frame written: its payload, for a later replay.
func (fw *frameWriter) record(frame []byte) {
	if fw.cond == nil || len(frame) < agent.FrameHeaderLen {
		return
	}
	k := streamIndex(frame[0])
	if k < 0 {
		return
	}
	p := frame[agent.FrameHeaderLen:]
	fw.sent[k] += int64(len(p))
	fw.ring[k] = append(fw.ring[k], p...)
	if len(fw.ring[k]) > replayMax+replayMax/4 {
		fw.ring[k] = append([]byte(nil), fw.ring[k][len(fw.ring[k])-replayMax:]...)
	}
}

// skipDelivered drops from frame what an attach said the host already has (the frame whose
// write failed may have reached it whole).
func (fw *frameWriter) skipDelivered(frame []byte) []byte {
	k := streamIndex(frame[0])
	if k < 0 || fw.skip[k] == 0 {
		return frame
	}
	n := int64(len(frame) - agent.FrameHeaderLen)
	d := min(fw.skip[k], n)
	fw.skip[k] -= d
	fw.sent[k] += d
	out := make([]byte, agent.FrameHeaderLen+int(n-d))
	agent.PutFrameHeader(out, frame[0], int(n-d))
	copy(out[agent.FrameHeaderLen:], frame[agent.FrameHeaderLen+int(d):])
	return out
}

func streamIndex(kind byte) int {
	switch kind {
	case agent.FrameStdout:
		return 0
	case agent.FrameStderr:
		return 1
	}
	return -1
}

// attach makes w the stream's writer: it sends again what the host lacks from offs on, and
// answers the generation it began.
func (fw *frameWriter) attach(w io.Writer, rc *http.ResponseController, ch *channel, offs [2]int64, fromNow bool) (int, error) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.gaveUp {
		return 0, errors.New("the process was ended: nobody attached in time")
	}
	if fromNow {
		offs = fw.sent
	}
	fw.w, fw.rc, fw.err, fw.ch = w, rc, nil, ch
	fw.gen++
	kinds := [2]byte{agent.FrameStdout, agent.FrameStderr}
	for k := range 2 {
		fw.skip[k] = 0
		switch from := offs[k]; {
		case from > fw.sent[k]:
			fw.skip[k] = from - fw.sent[k]
		case from < fw.sent[k]:
			back := fw.sent[k] - from
			b := fw.ring[k]
			if back > int64(len(b)) {
				// More than the window: the host misses bytes (it sees the offsets jump).
				back = int64(len(b))
			}
			b = b[len(b)-int(back):]
			for len(b) > 0 {
				n := min(len(b), agent.MaxFrame)
				frame := make([]byte, agent.FrameHeaderLen+n)
				agent.PutFrameHeader(frame, kinds[k], n)
				copy(frame[agent.FrameHeaderLen:], b[:n])
				if _, err := fw.w.Write(frame); err != nil {
					fw.err = err
					return fw.gen, err
				}
				b = b[n:]
			}
		}
	}
	if err := fw.rc.Flush(); err != nil {
		fw.err = err
	}
	fw.cond.Broadcast()
	return fw.gen, fw.err
}

func (s *Server) handleAttach(w http.ResponseWriter, r *http.Request) {
	raw := strings.TrimRight(r.Header.Get(agent.HeaderAttach), "=")
	b, err := base64.RawURLEncoding.DecodeString(raw)
	var req agent.AttachRequest
	if err == nil {
		err = json.Unmarshal(b, &req)
	}
	if err != nil {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: agent.HeaderAttach + ": " + err.Error()})
		return
	}
	id := r.PathValue("id")
	attachables.Lock()
	a := attachables.m[id]
	attachables.Unlock()
	if a == nil {
		writeError(w, &agent.Error{Code: agent.CodeNotFound, Message: fmt.Sprintf("no detached process %q", id)})
		return
	}
	// A stream still live on this very channel is its caller's: an attach would take it from
	// it. From a next channel (the last one ended, whether or not its end was seen yet), it is
	// what an attach is for.
	a.fw.mu.Lock()
	live := a.fw.err == nil && a.fw.ch == channelOf(r)
	a.fw.mu.Unlock()
	if live {
		writeError(w, &agent.Error{Code: agent.CodeExists, Message: fmt.Sprintf("the stream of process %q is live on this channel", id)})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	started, _ := json.Marshal(agent.Started{Pid: a.pid})
	frame := make([]byte, agent.FrameHeaderLen+len(started))
	agent.PutFrameHeader(frame, agent.FrameStarted, len(started))
	copy(frame[agent.FrameHeaderLen:], started)
	if _, err := w.Write(frame); err != nil {
		return
	}
	gen, err := a.fw.attach(w, rc, channelOf(r), [2]int64{req.Stdout, req.Stderr}, req.FromNow)
	if err != nil {
		return
	}
	if req.Stdin && a.inW != nil {
		go func() {
			if _, err := io.Copy(a.inW, r.Body); err == nil {
				a.inW.Close()
			}
		}()
	}
	select {
	case <-a.done:
	case <-r.Context().Done():
		a.lost(gen)
	}
}

// handleDropDetached kills every detachable process whose stream waits for an attach: a
// fork's copies of its source's commands, which nobody will attach.
func (s *Server) handleDropDetached(w http.ResponseWriter, r *http.Request) {
	attachables.Lock()
	var kill []func()
	for _, a := range attachables.m {
		a.fw.mu.Lock()
		if a.fw.err != nil {
			a.fw.gaveUp = true
			a.fw.cond.Broadcast()
			kill = append(kill, a.kill)
		}
		a.fw.mu.Unlock()
	}
	attachables.Unlock()
	for _, k := range kill {
		k()
	}
	w.WriteHeader(http.StatusNoContent)
}
