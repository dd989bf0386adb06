//go:build linux

package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// qmp speaks QEMU's machine protocol on one connection (the driver's end of a socketpair
// whose other end QEMU serves with -mon): one command at a time, each answered by a "return"
// or an "error", with asynchronous events between. A command may pass a file descriptor
// (getfd), which needs a unix socket's SCM_RIGHTS. (github.com/digitalocean/go-qemu's qmp
// dials a path and passes no descriptors; QMP itself is a few JSON lines.)
type qmp struct {
	conn *net.UnixConn
	cmd  sync.Mutex // one command in flight

	replies chan qmpReply
	mu      sync.Mutex
	events  []qmpEvent // the last ones, oldest first
	seq     int        // how many events were ever received
	notify  chan struct{}
	done    chan struct{}
	err     error
}

type qmpReply struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
}

type qmpEvent struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

// newQMP reads QEMU's greeting on conn and enters command mode.
func newQMP(ctx context.Context, conn *net.UnixConn) (*qmp, error) {
	q := &qmp{conn: conn, replies: make(chan qmpReply, 1), notify: make(chan struct{}), done: make(chan struct{})}
	greeting := make(chan error, 1)
	go q.read(greeting)
	select {
	case err := <-greeting:
		if err != nil {
			return nil, fmt.Errorf("qmp greeting: %w", err)
		}
	case <-ctx.Done():
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: %w", ctx.Err())
	}
	if _, err := q.run(ctx, "qmp_capabilities", nil, nil); err != nil {
		return nil, err
	}
	return q, nil
}

func (q *qmp) read(greeting chan<- error) {
	defer close(q.done)
	sc := bufio.NewScanner(q.conn)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	first := true
	for sc.Scan() {
		line := sc.Bytes()
		if first {
			first = false
			var g struct{ QMP json.RawMessage }
			if err := json.Unmarshal(line, &g); err != nil || g.QMP == nil {
				greeting <- fmt.Errorf("not a QMP greeting: %q", line)
				return
			}
			greeting <- nil
			continue
		}
		var probe struct {
			Event string `json:"event"`
		}
		if err := json.Unmarshal(line, &probe); err != nil {
			continue
		}
		if probe.Event != "" {
			var ev qmpEvent
			json.Unmarshal(line, &ev)
			q.mu.Lock()
			q.events = append(q.events, ev)
			if len(q.events) > 64 {
				q.events = q.events[1:]
			}
			q.seq++
			close(q.notify)
			q.notify = make(chan struct{})
			q.mu.Unlock()
			continue
		}
		var r qmpReply
		if err := json.Unmarshal(line, &r); err == nil {
			q.replies <- r
		}
	}
	q.mu.Lock()
	q.err = sc.Err()
	if q.err == nil {
		q.err = errors.New("QEMU closed its monitor")
	}
	q.mu.Unlock()
	if first {
		greeting <- q.err
	}
}

// run executes command with args (nil for none), passing file (when set) along with it, and
// answers its return value.
func (q *qmp) run(ctx context.Context, command string, args any, file *os.File) (json.RawMessage, error) {
	q.cmd.Lock()
	defer q.cmd.Unlock()
	msg := map[string]any{"execute": command}
	if args != nil {
		msg["arguments"] = args
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	var oob []byte
	if file != nil {
		oob = syscall.UnixRights(int(file.Fd()))
	}
	if dl, ok := ctx.Deadline(); ok {
		q.conn.SetWriteDeadline(dl)
		defer q.conn.SetWriteDeadline(time.Time{})
	}
	if _, _, err := q.conn.WriteMsgUnix(append(b, '\n'), oob, nil); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	select {
	case r := <-q.replies:
		if r.Error != nil {
			return nil, fmt.Errorf("qmp %s: %s: %s", command, r.Error.Class, r.Error.Desc)
		}
		return r.Return, nil
	case <-q.done:
		return nil, fmt.Errorf("qmp %s: %w", command, q.closedErr())
	case <-ctx.Done():
		// The reply may still come; this connection is no use any more.
		q.conn.Close()
		return nil, fmt.Errorf("qmp %s: %w", command, ctx.Err())
	}
}

func (q *qmp) closedErr() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// mark answers how many events came so far: waitEvent after it sees only later ones.
func (q *qmp) mark() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.seq
}

// waitEvent waits for an event after mark for which match is true.
func (q *qmp) waitEvent(ctx context.Context, mark int, match func(qmpEvent) bool) error {
	for {
		q.mu.Lock()
		first := q.seq - len(q.events) // seq of events[0]
		for i, ev := range q.events {
			if first+i >= mark && match(ev) {
				q.mu.Unlock()
				return nil
			}
		}
		notify := q.notify
		q.mu.Unlock()
		select {
		case <-notify:
		case <-q.done:
			return q.closedErr()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (q *qmp) close() { q.conn.Close() }
