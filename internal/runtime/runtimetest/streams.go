package runtimetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// The hostile cases of the streams the host opens toward something inside a sandbox: a
// preview's connection to a port (POST /v1/ports/{port}/connect), a terminal (an exec on a
// pty and its resizes), and the detachable streams (attach, drop, the timeouts held while
// a sandbox is paused). What must hold is the same whatever the program inside does, and
// whatever a buggy host sends: each stream reaches its own sandbox's loopback or process
// only, holds bounded memory on both ends, blocks no other stream of the channel, ends with
// what it started, and a request that makes no sense is answered with an error while the
// agent goes on serving.

// serverPy serves a TCP port of the sandbox's loopback: it prints "ready" once it listens,
// then, by mode, answers each connection "inside <port>" and closes it ("hello"), sends
// without end and never reads ("flood"), or holds it open, silent ("hold").
const serverPy = `import socket, sys, threading
port, mode = int(sys.argv[1]), sys.argv[2]
ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port))
ls.listen(512)
held = []
print("ready", flush=True)
def flood(c):
    chunk = b"f" * 65536
    try:
        while True:
            c.sendall(chunk)
    except OSError:
        pass
while True:
    c, _ = ls.accept()
    if mode == "hello":
        c.sendall(b"inside %d\n" % port)
        c.close()
    elif mode == "hold":
        held.append(c)
    else:
        threading.Thread(target=flood, args=(c,), daemon=True).start()
`

// in answers b for subtest t.
func (b *box) in(t *testing.T) *box {
	c := *b
	c.t = t
	return &c
}

// serveInside runs serverPy in b on port until stop (or the test's end), which kills it.
func (b *box) serveInside(port int, mode string) (stop func()) {
	b.t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	p, err := b.c.Exec(ctx, agent.ExecRequest{ID: fmt.Sprintf("server_%d", cmdSeq.Add(1)),
		Argv: []string{"python3", "-c", serverPy, fmt.Sprint(port), mode}}, nil)
	if err != nil {
		cancel()
		b.t.Fatal(err)
	}
	outR, outW := io.Pipe()
	done := make(chan struct{})
	var errb strings.Builder
	go func() {
		defer close(done)
		ex, err := p.Wait(outW, &errb)
		outW.CloseWithError(fmt.Errorf("the server ended: %+v %v: %s", ex, err, errb.String()))
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			go io.Copy(io.Discard, outR)
			<-done
		})
	}
	b.t.Cleanup(stop)
	if line, err := readLine(outR); err != nil || line != "ready" {
		stop()
		b.t.Fatalf("server on port %d: %q %v", port, line, err)
	}
	go io.Copy(io.Discard, outR)
	return stop
}

// dialRead connects to port through the channel and answers what the connection sends until
// its end (at most 1 KiB, within 20 s).
func (b *box) dialRead(port int) (string, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	st, err := b.c.DialPort(ctx, port)
	if err != nil {
		return "", err
	}
	defer st.Close()
	st.CloseWrite()
	data, err := io.ReadAll(io.LimitReader(st, 1024))
	return string(data), err
}

// portConnectInside: a preview's connection reaches the sandbox's own loopback and nothing
// else: not a server on the host's loopback (whatever port it is on), not port 0, 65536 or a
// port that is no number; each such call is answered with an error and the agent goes on.
func (e *env) portConnectInside(t *testing.T) {
	hostPort := HostSecret(t)
	b := e.shared(t)
	if out, err := b.dialRead(hostPort); err == nil || strings.Contains(out, "host secret") {
		t.Errorf("connect to port %d (the host's server): %q %v", hostPort, out, err)
	} else if !isCode(err, agent.CodePortRefused) {
		t.Errorf("connect to port %d, where nothing inside listens: %v, want %s", hostPort, err, agent.CodePortRefused)
	}
	const port = 18080
	b.serveInside(port, "hello")
	if out, err := b.dialRead(port); err != nil || out != fmt.Sprintf("inside %d\n", port) {
		t.Errorf("connect to the sandbox's server: %q %v", out, err)
	}
	for _, p := range []int{0, -1, 65536, 1 << 20} {
		if out, err := b.dialRead(p); !isCode(err, agent.CodeInvalid) {
			t.Errorf("connect to port %d: %q %v, want %s", p, out, err, agent.CodeInvalid)
		}
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	for _, p := range []string{"abc", "80x", "0x50", "1e3", "-80", "99999999999999999999", "%2F", "%20" + fmt.Sprint(port), "..%2F..%2Fping"} {
		err := b.c.Do(ctx, http.MethodPost, agent.PathPorts+p+"/connect", nil, strings.NewReader("GET / HTTP/1.0\r\n\r\n"))
		if err == nil {
			t.Errorf("connect to port %q: answered 2xx", p)
		} else if !isCode(err, agent.CodeInvalid) && !isCode(err, agent.CodeNotFound) {
			t.Errorf("connect to port %q: %v, want %s", p, err, agent.CodeInvalid)
		}
	}
	if err := b.c.Do(ctx, http.MethodGet, agent.PathPorts+fmt.Sprint(port)+"/connect", nil, nil); err == nil {
		t.Error("GET on the connect route answered 2xx")
	}
	if err := b.ping(); err != nil {
		t.Fatalf("the agent after the bad connects: %v", err)
	}
}

// portConnectNotAgent: the agent's own listeners on the sandbox's loopback (the egress
// proxies, the forwarded API, which carries the sandbox's API grant) are the sandbox's
// programs' way out, not a port a preview may show: a connect to them is refused, while the
// programs inside still reach them.
func (e *env) portConnectNotAgent(t *testing.T) {
	b := e.shared(t)
	g := egress.NewGuard(egress.Options{})
	sb, err := g.NewSandbox(b.id, store.Egress{Mode: store.EgressPublic}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := g.Open(context.Background(), b.c, sb, egress.Listen(sb, true, nil))
	if err != nil {
		t.Fatalf("opening the egress: %v", err)
	}
	defer sess.Close()
	if out := b.ok("curl -sS -m 10 --noproxy '*' http://" + egress.APIAddr + "/v1/ping"); !strings.Contains(out, "no API grant") {
		t.Errorf("the forwarded API from inside: %q", out)
	}
	for _, addr := range []string{egress.ProxyAddr, egress.SOCKSAddr, egress.APIAddr} {
		var port int
		fmt.Sscanf(addr[strings.LastIndex(addr, ":")+1:], "%d", &port)
		ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
		st, err := b.c.DialPort(ctx, port)
		if err == nil {
			fmt.Fprintf(st, "GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", HostSecret(t))
			buf := make([]byte, 200)
			n, _ := st.Read(buf)
			st.Close()
			t.Errorf("a connect to port %d reached the agent's own listener %s: %q", port, addr, buf[:n])
		} else if !isCode(err, agent.CodePermission) {
			t.Errorf("connect to port %d (the agent's %s): %v, want %s", port, addr, err, agent.CodePermission)
		}
		cancel()
	}
	if u := sb.Usage(); u.Connections != 0 {
		t.Errorf("the guard counted %+v", u)
	}
	if err := b.ping(); err != nil {
		t.Fatalf("agent: %v", err)
	}
}

// heapWatch samples the test process's heap until stop, which answers how far it grew.
func heapWatch() (stop func() int64) {
	var ms goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	done, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				var m goruntime.MemStats
				goruntime.ReadMemStats(&m)
				peak = max(peak, m.HeapInuse)
			}
		}
	}()
	return func() int64 {
		close(done)
		<-sampled
		return int64(peak) - int64(base)
	}
}

// portBackpressure: a server inside that floods its connections and never reads them, behind
// preview connections the host neither reads (slow visitors): each stream holds no more than
// its window on either end, the host's heap stays small, and the channel's other streams (a
// command's output, a file up and down, a ping) go on. HTTP/2 gives a connection's credit back
// only as a stream is read: 40 such streams once took the whole connection window of both
// ends and froze the channel (agent.MaxStreams).
func (e *env) portBackpressure(t *testing.T) {
	b := e.shared(t)
	const port, streams = 18081, 40
	stop := b.serveInside(port, "flood")
	defer stop()
	heap := heapWatch()
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var wg sync.WaitGroup
	var written [streams]atomic.Int64
	var sts []*agent.Stream
	defer func() {
		for _, st := range sts {
			st.Close()
		}
	}()
	for i := range streams {
		st, err := b.c.DialPort(ctx, port)
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		sts = append(sts, st)
		wg.Add(1)
		go func() {
			defer wg.Done()
			chunk := bytes.Repeat([]byte("w"), 64<<10)
			for written[i].Load() < 256<<20 {
				if _, err := st.Write(chunk); err != nil {
					return
				}
				written[i].Add(int64(len(chunk)))
			}
		}()
	}
	time.Sleep(2 * time.Second)
	b.besideUnread(t, fmt.Sprintf("%d unread port streams", streams))
	grew := heap()
	var total int64
	for i := range streams {
		// The agent's window for the stream, and the sockets' buffers inside: a few MiB.
		n := written[i].Load()
		total += n
		if n > 48<<20 {
			t.Errorf("stream %d took %d MiB from the host toward a server that never reads", i, n>>20)
		}
	}
	// A stream's window and the frame buffer of its body: a few hundred KiB a stream.
	if grew > 64<<20 {
		t.Errorf("the host heap grew by %d MiB for %d unread streams", grew>>20, streams)
	}
	t.Logf("host heap grew by at most %d MiB; written toward the server: %d KiB in all, %d KiB a stream",
		grew>>20, total>>10, total/streams>>10)
	for _, st := range sts {
		st.Close()
	}
	cancel()
	wg.Wait()
	stop()
	if err := b.ping(); err != nil {
		t.Fatalf("agent after the streams ended: %v", err)
	}
}

// besideUnread checks that the channel still carries a command, a 2 MiB file up and down and
// a ping, each within a minute (a frozen channel fails rather than hangs); what names the
// streams left unread beside them.
func (b *box) besideUnread(t *testing.T, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	start := time.Now()
	p, err := b.c.Exec(ctx, agent.ExecRequest{ID: fmt.Sprintf("beside_%d", cmdSeq.Add(1)), Argv: []string{"echo", "alive"}}, nil)
	if err != nil {
		t.Fatalf("a command beside %s: %v", what, err)
	}
	var out strings.Builder
	if ex, err := p.Wait(&out, nil); err != nil || ex.ExitCode != 0 || out.String() != "alive\n" {
		t.Errorf("a command beside %s: %+v %v %q", what, ex, err, out.String())
	}
	const name = "beside-the-unread"
	payload := strings.Repeat("0123456789abcdef", 128<<10) // 2 MiB
	if err := b.c.WriteFile(ctx, name, 0, strings.NewReader(payload)); err != nil {
		t.Errorf("a file upload beside %s: %v", what, err)
	} else if r, err := b.c.ReadFile(ctx, name); err != nil {
		t.Errorf("a file download beside %s: %v", what, err)
	} else {
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || string(got) != payload {
			t.Errorf("a file download beside %s: %d bytes, %v", what, len(got), err)
		}
		b.c.Remove(ctx, name, false)
	}
	if err := b.c.Ping(ctx); err != nil {
		t.Errorf("ping beside %s: %v", what, err)
	}
	t.Logf("a command, a 2 MiB file up and down and a ping beside %s took %v", what, time.Since(start))
}

// streamsUnread: the streams of commands the host leaves unread on either end (stdin toward
// processes that never read it; stdout nobody reads, as a detached command's held output
// whose reader is away) never stall the channel's other streams, and the host's heap stays
// small. Four unread uploads once took the agent's whole connection window and stalled every
// file write and stdin.
func (e *env) streamsUnread(t *testing.T) {
	b := e.shared(t)
	const uploads, outputs = 24, 24
	heap := heapWatch()
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var given [uploads]atomic.Int64
	var ps []*agent.Process
	defer func() {
		cancel()
		for _, p := range ps {
			p.Wait(nil, nil)
		}
	}()
	for i := range uploads {
		in := readerFunc(func(p []byte) (int, error) {
			if ctx.Err() != nil {
				return 0, io.EOF
			}
			n := min(len(p), 32<<10)
			clear(p[:n])
			given[i].Add(int64(n))
			return n, nil
		})
		p, err := b.c.Exec(ctx, agent.ExecRequest{ID: fmt.Sprintf("deaf_%d", cmdSeq.Add(1)), Argv: []string{"sleep", "600"}}, in)
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		ps = append(ps, p)
	}
	for i := range outputs {
		p, err := b.c.Exec(ctx, agent.ExecRequest{ID: fmt.Sprintf("loud_%d", cmdSeq.Add(1)), Argv: []string{"cat", "/dev/zero"}}, nil)
		if err != nil {
			t.Fatalf("output %d: %v", i, err)
		}
		ps = append(ps, p)
	}
	time.Sleep(2 * time.Second)
	b.besideUnread(t, fmt.Sprintf("%d unread uploads and %d unread outputs", uploads, outputs))
	grew := heap()
	var total int64
	for i := range uploads {
		n := given[i].Load()
		total += n
		// The agent's window for the stream and the pipe's buffer: well under a few MiB.
		if n > 8<<20 {
			t.Errorf("upload %d took %d MiB toward a process that never reads", i, n>>20)
		}
	}
	if grew > 96<<20 {
		t.Errorf("the host heap grew by %d MiB for %d unread streams", grew>>20, uploads+outputs)
	}
	t.Logf("host heap grew by at most %d MiB; given to the uploads: %d KiB in all", grew>>20, total>>10)
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// portStreamsMany: a preview's visitors may open many connections to a port whose server
// holds them, silent; past agent.MaxPortStreams the agent refuses them, so that they never
// take every stream of the channel from the sandbox's commands and files.
func (e *env) portStreamsMany(t *testing.T) {
	b := e.shared(t)
	const port = 18083
	stop := b.serveInside(port, "hold")
	defer stop()
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var sts []*agent.Stream
	defer func() {
		for _, st := range sts {
			st.Close()
		}
	}()
	// A connect that waits for a stream of the channel would wait for ever: each has 30 s (a
	// loaded host takes a quarter of a second per connect, and the whole loop over a minute).
	start := time.Now()
	refused := 0
	for i := 0; i < 1200 && refused < 8; i++ {
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := b.c.DialPort(cctx, port)
		timedOut := cctx.Err() != nil
		ccancel()
		switch {
		case err == nil:
			sts = append(sts, st)
		case isCode(err, agent.CodePortRefused):
			refused++
		case timedOut:
			t.Fatalf("the connects took the channel: connect %d waited 30 s (%d open after %v): %v", i, len(sts), time.Since(start), err)
		default:
			t.Fatalf("connect %d (%d open, after %v): %v", i, len(sts), time.Since(start), err)
		}
	}
	t.Logf("%d connects open, %d refused, in %v", len(sts), refused, time.Since(start))
	if len(sts) > agent.MaxPortStreams || refused == 0 {
		t.Errorf("%d connects open at once, %d refused: want at most %d", len(sts), refused, agent.MaxPortStreams)
	}
	cctx, ccancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer ccancel()
	if err := b.c.Ping(cctx); err != nil {
		t.Fatalf("ping beside the connects: %v", err)
	}
	p, err := b.c.Exec(cctx, agent.ExecRequest{ID: fmt.Sprintf("beside_%d", cmdSeq.Add(1)), Argv: []string{"echo", "alive"}}, nil)
	if err != nil {
		t.Fatalf("a command beside the connects: %v", err)
	}
	var out strings.Builder
	if ex, err := p.Wait(&out, nil); err != nil || ex.ExitCode != 0 || out.String() != "alive\n" {
		t.Errorf("a command beside the connects: %+v %v %q", ex, err, out.String())
	}
	for _, st := range sts {
		st.Close()
	}
	sts = nil
	// Closed, they are given back: a connect goes through again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := b.c.DialPort(cctx, port)
		if err == nil {
			st.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connect after the others closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// terminal is a process on a pty whose output is collected.
type terminal struct {
	b      *box
	id     string
	p      *agent.Process
	in     *io.PipeWriter
	out    *lockedBuffer
	done   chan struct{}
	exit   agent.Exit
	err    error
	cancel context.CancelFunc
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	n  int64
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n += int64(len(p))
	if l.b.Len() < 1<<20 {
		l.b.Write(p[:min(len(p), 1<<20-l.b.Len())])
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) Len() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// terminal starts argv on a pty of size; its stream ends with the test, or with close.
func (b *box) terminal(argv []string, size agent.PtySize, timeoutMs int64) *terminal {
	b.t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	pr, pw := io.Pipe()
	tm := &terminal{b: b, id: fmt.Sprintf("term_%d", cmdSeq.Add(1)), in: pw, out: &lockedBuffer{}, done: make(chan struct{}), cancel: cancel}
	p, err := b.c.Exec(ctx, agent.ExecRequest{ID: tm.id, Argv: argv, Pty: &size, TimeoutMs: timeoutMs,
		Env: map[string]string{"PS1": "$ "}}, pr)
	if err != nil {
		cancel()
		b.t.Fatalf("terminal %q: %v", argv, err)
	}
	tm.p = p
	go func() {
		defer close(tm.done)
		tm.exit, tm.err = p.Wait(tm.out, nil)
	}()
	b.t.Cleanup(tm.close)
	return tm
}

// close ends the terminal's stream, as a host that closes it does, and waits for its end.
func (tm *terminal) close() {
	tm.cancel()
	tm.in.Close()
	<-tm.done
}

func (tm *terminal) typ(s string) {
	tm.b.t.Helper()
	if _, err := io.WriteString(tm.in, s); err != nil {
		tm.b.t.Fatalf("typing into the terminal: %v", err)
	}
}

// waitFor waits for want in the terminal's output.
func (tm *terminal) waitFor(want string) {
	tm.b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(tm.out.String(), want) {
		select {
		case <-tm.done:
			if strings.Contains(tm.out.String(), want) {
				return
			}
			tm.b.t.Fatalf("the terminal ended (%+v %v) without %q:\n%s", tm.exit, tm.err, want, trim(tm.out.String()))
		default:
		}
		if time.Now().After(deadline) {
			tm.b.t.Fatalf("no %q in the terminal's output:\n%s", want, trim(tm.out.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shell starts an interactive bash on an 80x24 terminal.
func (b *box) shell(timeoutMs int64) *terminal {
	b.t.Helper()
	return b.terminal([]string{"bash", "--norc", "-i"}, agent.PtySize{Cols: 80, Rows: 24}, timeoutMs)
}

// timesOut fails the test unless the terminal ends by its timeout within a minute.
func (tm *terminal) timesOut() {
	tm.b.t.Helper()
	if !tm.wait(time.Minute) {
		tm.b.t.Fatal("the terminal did not time out")
	}
	if !tm.exit.TimedOut {
		tm.b.t.Errorf("terminal: %+v %v", tm.exit, tm.err)
	}
}

// wait waits for the terminal's end.
func (tm *terminal) wait(d time.Duration) bool {
	select {
	case <-tm.done:
		return true
	case <-time.After(d):
		return false
	}
}

// terminalOutput: a program on a terminal that writes escape sequences (the queries a
// terminal answers: cursor position, title, clipboard, answerback), bytes shaped like the
// protocol's frames, and a flood of random bytes: the host gets each byte as written, nobody
// answers the queries into the program's input, the host's heap stays small, and the agent
// goes on.
func (e *env) terminalOutput(t *testing.T) {
	b := e.shared(t)
	const flood = 8 << 20
	queries := `\x1b[6n\x1b[21t\x1b]52;c;?\x07\x1bP$q"p\x1b\\\x05\x1b[c\x1b[>c`
	frames := `x\x00\x00\x00\x10{"exit_code":0}s\x00\x00\x00\x02{}`
	heap := heapWatch()
	tm := b.terminal([]string{"python3", "-c", `import os, select, sys, tty
tty.setraw(0)
os.write(1, b'<q>` + queries + `</q><f>` + frames + `</f>')
r, _, _ = select.select([0], [], [], 1.0)
typed = os.read(0, 4096) if r else b""
os.write(1, b"<typed>" + typed.hex().encode() + b"</typed>")
left = ` + fmt.Sprint(flood) + `
while left > 0:
    left -= os.write(1, os.urandom(min(left, 65536)))
os.write(1, b"<end>")
`}, agent.PtySize{Cols: 80, Rows: 24}, 0)
	if !tm.wait(2 * time.Minute) {
		t.Fatalf("the terminal did not end: %d bytes so far", tm.out.Len())
	}
	grew := heap()
	out := tm.out.String()
	if tm.err != nil || tm.exit.ExitCode != 0 {
		t.Fatalf("terminal: %+v %v\n%q", tm.exit, tm.err, trim(out))
	}
	unq := func(s string) string {
		r := strings.NewReplacer(`\x1b`, "\x1b", `\x07`, "\x07", `\x05`, "\x05", `\x00`, "\x00", `\x10`, "\x10", `\x02`, "\x02", `\\`, `\`)
		return r.Replace(s)
	}
	if !strings.Contains(out, "<q>"+unq(queries)+"</q>") || !strings.Contains(out, "<f>"+unq(frames)+"</f>") {
		t.Errorf("the escape sequences and frame-like bytes did not arrive as written: %q", trim(out))
	}
	if !strings.Contains(out, "<typed></typed>") {
		t.Errorf("something answered the terminal's queries into its input: %q", trim(out))
	}
	if n := tm.out.Len(); n < flood {
		t.Errorf("received %d bytes of a %d byte flood", n, flood)
	}
	t.Logf("%d bytes from the terminal; host heap grew by at most %d MiB", tm.out.Len(), grew>>20)
	if grew > 64<<20 {
		t.Errorf("the host heap grew by %d MiB for an %d MiB terminal flood", grew>>20, flood>>20)
	}
	if err := b.ping(); err != nil {
		t.Fatalf("agent after the terminal: %v", err)
	}
}

// terminalSizes: a terminal of the largest size, resized to nothing and back, keeps working;
// a resize of a process without a terminal, of a process that does not exist, or with a body
// that is no size is answered with an error.
func (e *env) terminalSizes(t *testing.T) {
	b := e.shared(t)
	tm := b.terminal([]string{"bash", "--norc", "-i"}, agent.PtySize{Cols: 65535, Rows: 65535}, 0)
	tm.typ("stty size; echo sized-$((1+1))\n")
	tm.waitFor("sized-2")
	if !strings.Contains(tm.out.String(), "65535 65535") {
		t.Errorf("stty size at 65535x65535: %q", trim(tm.out.String()))
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	for _, sz := range []agent.PtySize{{}, {Cols: 65535}, {Rows: 65535}, {Cols: 1, Rows: 1}, {Cols: 65535, Rows: 65535}, {Cols: 120, Rows: 40}} {
		if err := b.c.Resize(ctx, tm.id, sz); err != nil {
			t.Errorf("resize to %+v: %v", sz, err)
		}
	}
	tm.typ("stty size; echo resized-$((2+2))\n")
	tm.waitFor("resized-4")
	if !strings.Contains(tm.out.String(), "40 120") {
		t.Errorf("stty size after the resizes: %q", trim(tm.out.String()))
	}
	for _, body := range []string{"", "{", "[1,2]", `{"cols":-1,"rows":1}`, `{"cols":65536,"rows":1}`, `{"cols":"x"}`, strings.Repeat("[", 8192)} {
		err := b.c.Do(ctx, http.MethodPost, agent.PathProcs+tm.id+"/resize", nil, strings.NewReader(body))
		if !isCode(err, agent.CodeInvalid) {
			t.Errorf("resize with %q: %v, want %s", trim(body), err, agent.CodeInvalid)
		}
	}
	if err := b.c.Resize(ctx, "no-such-terminal", agent.PtySize{Cols: 80, Rows: 24}); !isCode(err, agent.CodeNotFound) {
		t.Errorf("resize of no process: %v, want %s", err, agent.CodeNotFound)
	}
	plainID := fmt.Sprintf("plain_%d", cmdSeq.Add(1))
	plain, err := b.c.Exec(ctx, agent.ExecRequest{ID: plainID, Argv: []string{"sleep", "30"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		b.c.Signal(b.ctx, plainID, "KILL")
		plain.Wait(nil, nil)
	}()
	if err := b.c.Resize(ctx, plainID, agent.PtySize{Cols: 80, Rows: 24}); !isCode(err, agent.CodeInvalid) {
		t.Errorf("resize of a process without a terminal: %v, want %s", err, agent.CodeInvalid)
	}
	tm.typ("echo still-$((3+3))\n")
	tm.waitFor("still-6")
	if err := b.ping(); err != nil {
		t.Fatalf("agent: %v", err)
	}
}

// terminalForkBomb: a fork bomb typed into a terminal of b, whose pid limit is limit, stops
// at that limit and ends with the terminal's timeout; the agent and the sandbox go on.
func terminalForkBomb(t *testing.T, b *box, limit int) {
	tm := b.shell(4000)
	tm.typ("bomb() { bomb | bomb & }; bomb; sleep 100\n")
	tm.timesOut()
	if st, err := b.sb.Stats(b.ctx); err != nil || st.Pids > uint64(limit) {
		t.Errorf("pids %d > %d (%v)", st.Pids, limit, err)
	}
	if err := b.ping(); err != nil {
		t.Fatalf("agent after the bomb: %v", err)
	}
	b.usableAgain()
}

// terminalJobs: the jobs a terminal's shell started (each in a process group of its own, as
// job control makes them; nohup'd too) end with the terminal when the host closes it or its
// timeout fires, also while another command runs. (What leaves the terminal's session, with
// setsid, is the case of "timeout kills what left the group".)
func (e *env) terminalJobs(t *testing.T) {
	b := e.shared(t)
	ctx, cancel := context.WithCancel(b.ctx)
	bystander, err := b.c.Exec(ctx, agent.ExecRequest{ID: fmt.Sprintf("bystander_%d", cmdSeq.Add(1)), Argv: []string{"sleep", "1000"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	left := func(names ...string) []string {
		out := b.ok("ps -eo args=")
		var found []string
		for _, l := range strings.Split(out, "\n") {
			for _, n := range names {
				if strings.TrimSpace(l) == n {
					found = append(found, l)
				}
			}
		}
		return found
	}
	tm := b.shell(0)
	tm.typ("sleep 1001 & nohup sleep 1002 >/dev/null 2>&1 & (sleep 1003 &) ; echo jobs-$((3*3))\n")
	tm.waitFor("jobs-9")
	if l := left("sleep 1001", "sleep 1002", "sleep 1003"); len(l) != 3 {
		t.Fatalf("the jobs did not start: %q", l)
	}
	tm.close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l := left("sleep 1001", "sleep 1002", "sleep 1003")
		if len(l) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the terminal's jobs outlived it (another command running): %q", l)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	bystander.Wait(nil, nil)
	b.onlyAgentLeft()
	// Its timeout ends them too.
	tm = b.shell(3000)
	tm.typ("sleep 1004 & nohup sleep 1005 >/dev/null 2>&1 & echo jobs-$((4*4)); sleep 100\n")
	tm.waitFor("jobs-16")
	tm.timesOut()
	b.onlyAgentLeft()
}

// terminalPaused: a terminal's program stops while its sandbox is frozen (a driver's
// Freezer: what pause does), its timeout is held while the host holds the timeouts (as it
// does while the sandbox is paused) and fires once they are released; the timeouts route
// answers a body that is no request (null and {} among them: hold must be said) with an
// error and goes on, its timeouts still held.
func (e *env) terminalPaused(t *testing.T) {
	b := e.shared(t)
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	t.Cleanup(func() { b.c.HoldTimeouts(context.Background(), false) })
	if err := b.c.HoldTimeouts(ctx, true); err != nil {
		t.Fatal(err)
	}
	tm := b.shell(1500)
	tm.typ("echo up-$((5*5)); while :; do echo tick; sleep 0.05; done\n")
	tm.waitFor("up-25")
	if f, ok := e.d.(runtime.Freezer); ok {
		if err := f.Freeze(ctx, b.id); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // what was in flight arrives
		n := tm.out.Len()
		time.Sleep(time.Second)
		if m := tm.out.Len(); m != n {
			t.Errorf("the terminal's program wrote %d bytes while its sandbox was frozen", m-n)
		}
		if err := f.Thaw(ctx, b.id); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for tm.out.Len() == n && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if tm.out.Len() == n {
			t.Error("the terminal's program did not go on after the thaw")
		}
	}
	for _, body := range []string{"", "{", "null", "{}", `{"hold":null}`, "[true]", `{"hold":"yes"}`, `{"hold":1}`, strings.Repeat("{", 8192)} {
		if err := b.c.Do(ctx, http.MethodPost, agent.PathTimeouts, nil, strings.NewReader(body)); !isCode(err, agent.CodeInvalid) {
			t.Errorf("timeouts with %q: %v, want %s", trim(body), err, agent.CodeInvalid)
		}
	}
	if tm.wait(2500 * time.Millisecond) {
		t.Fatalf("the terminal ended while its timeout was held: %+v %v", tm.exit, tm.err)
	}
	if err := b.c.HoldTimeouts(ctx, false); err != nil {
		t.Fatal(err)
	}
	tm.timesOut()
	b.onlyAgentLeft()
}

// detachedStreams: an attach names a detached process or is refused (no such process, an
// attach header that is no request, a stream still live on the same channel); a drop kills
// only what waits for an attach, never a command whose stream is live, whatever its body says.
func (e *env) detachedStreams(t *testing.T) {
	b := e.shared(t)
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	id := fmt.Sprintf("detachable_%d", cmdSeq.Add(1))
	outR, outW := io.Pipe()
	p, err := b.c.Exec(ctx, agent.ExecRequest{ID: id, Detachable: true,
		Argv: []string{"sh", "-c", "i=0; while [ $i -lt 20 ]; do echo tick $i; i=$((i+1)); sleep 0.1; done"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	type waited struct {
		ex  agent.Exit
		err error
	}
	done := make(chan waited, 1)
	go func() {
		ex, err := p.Wait(outW, nil)
		outW.Close()
		done <- waited{ex, err}
	}()
	if line, err := readLine(outR); err != nil || line != "tick 0" {
		t.Fatalf("first line %q %v", line, err)
	}
	var rest bytes.Buffer
	copied := make(chan struct{})
	go func() {
		io.Copy(&rest, outR)
		close(copied)
	}()
	for _, body := range []string{"", "garbage", `{"all":true}`} {
		if err := b.c.Do(ctx, http.MethodPost, agent.PathDropDetached, nil, strings.NewReader(body)); err != nil {
			t.Errorf("drop with %q: %v", body, err)
		}
	}
	for _, a := range []struct{ id, hdr string }{
		{"no-such-process", ""}, {"no-such-process", "e30"}, {id + "x", "e30"}, {"..", "e30"}, {"%2E%2E%2Fsignal", "e30"},
		{id, "!!!"}, {id, "WzFd"}, {id, strings.Repeat("A", 10000)},
	} {
		hdr := http.Header{}
		if a.hdr != "" {
			hdr.Set(agent.HeaderAttach, a.hdr)
		}
		err := b.c.Do(ctx, http.MethodPost, agent.PathProcs+a.id+"/attach", hdr, nil)
		if err == nil {
			t.Errorf("attach %q with %q: answered 2xx", a.id, trim(a.hdr))
		} else if strings.HasPrefix(a.id, "no-such") && !isCode(err, agent.CodeInvalid) && !isCode(err, agent.CodeNotFound) {
			t.Errorf("attach %q with %q: %v", a.id, trim(a.hdr), err)
		}
	}
	if _, err := b.c.Attach(ctx, "no-such-process", agent.AttachRequest{}, nil); !isCode(err, agent.CodeNotFound) {
		t.Errorf("attach to no process: %v, want %s", err, agent.CodeNotFound)
	}
	// The live stream is its caller's: an attach on the same channel takes nothing from it
	// (not_found where streams are not detachable).
	if p, err := b.c.Attach(ctx, id, agent.AttachRequest{FromNow: true}, nil); err == nil {
		var out strings.Builder
		ex, err := p.Wait(&out, nil)
		t.Errorf("an attach took the live stream of %s: %+v %v %q", id, ex, err, out.String())
	} else if !isCode(err, agent.CodeExists) && !isCode(err, agent.CodeNotFound) {
		t.Errorf("attach to the live stream of %s: %v, want %s", id, err, agent.CodeExists)
	}
	w := <-done
	<-copied
	if w.err != nil || w.ex.ExitCode != 0 || !strings.HasSuffix(rest.String(), "tick 19\n") {
		t.Errorf("the live detachable command after the drops: %+v %v %q", w.ex, w.err, rest.String())
	}
	if err := b.ping(); err != nil {
		t.Fatalf("agent: %v", err)
	}
}

// streamsApart: what one sandbox's streams reach is its own: a port served in one is not
// there for a connect through the other's channel, nor is its terminal for a resize.
func streamsApart(a, b *box) {
	t := a.t
	const port = 18082
	a.serveInside(port, "hello")
	if out, err := b.dialRead(port); !isCode(err, agent.CodePortRefused) {
		t.Errorf("connect through the other sandbox's channel: %q %v, want %s", out, err, agent.CodePortRefused)
	}
	if out, err := a.dialRead(port); err != nil || out != fmt.Sprintf("inside %d\n", port) {
		t.Errorf("connect through its own channel: %q %v", out, err)
	}
	ta := a.shell(0)
	tb := b.shell(0)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := b.c.Resize(ctx, ta.id, agent.PtySize{Cols: 99, Rows: 33}); !isCode(err, agent.CodeNotFound) {
		t.Errorf("resize through b's channel of a's terminal: %v, want %s", err, agent.CodeNotFound)
	}
	ta.typ("stty size; echo a-$((7*7))\n")
	ta.waitFor("a-49")
	if strings.Contains(ta.out.String(), "33 99") {
		t.Errorf("a resize through b's channel reached a's terminal: %q", trim(ta.out.String()))
	}
	tb.typ("exit\n")
	tb.wait(10 * time.Second)
}
