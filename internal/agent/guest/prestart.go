package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// A pre-started interpreter (POST /v1/prestart) is a harness started with --lbb-prestart:
// it imports what it was asked to, flushes stdout and stderr, writes "ready\n" on fd 4 and
// blocks reading its request on fd 3. Until a run takes it, the agent reads and discards its
// stdout and stderr; when a run takes it, the agent stops discarding, empties the pipes
// (the harness writes nothing between "ready" and reading its request, so what is in them
// is from before the claim) and hands the request over. From then on it is a process stream
// like any other.

// prestartTimeout bounds how long a prestart may take when the host sets no deadline.
const prestartTimeout = 2 * time.Minute

// defaultImports are what an interpreter imports when the request names none.
var defaultImports = map[string][]string{
	agent.LangPython: {"numpy", "pandas"},
	agent.LangNode:   nil,
}

// validImport reports whether m is a python module name or a node module specifier (what
// `^[A-Za-z0-9_@][A-Za-z0-9_.@/:-]{0,199}$` matches); nothing a shell would read, though none
// sees it. A hand check, not a regexp: compiling that one (its {0,199} repeat makes a program
// of hundreds of instructions) cost every sandbox's init and agent stage a few hundred
// microseconds of CPU at package init, for a check made only at a prestart.
func validImport(m string) bool {
	if m == "" || len(m) > 200 {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '@':
		case i > 0 && (c == '.' || c == '/' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// startupEnv are variables an interpreter reads only when it starts: a run that sets one
// needs a fresh interpreter.
var startupEnv = []string{"PYTHON", "NODE_", "LD_", "LC_", "OMP_", "OPENBLAS_", "MKL_", "UV_", "MALLOC_"}

func needsFreshInterpreter(env map[string]string) bool {
	for k := range env {
		if k == "LANG" || k == "TZ" {
			return true
		}
		for _, p := range startupEnv {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
	}
	return false
}

func harnessArgv(lang string) []string {
	if lang == agent.LangPython {
		return []string{"python3", "-c", pythonHarness}
	}
	return []string{"node", "-e", nodeHarness}
}

// warmProc is a pre-started interpreter waiting for its request.
type warmProc struct {
	lang       string
	p          *proc
	reqW       *os.File // the harness's fd 3: the request, then EOF
	resR       *os.File // its fd 4: "ready\n", then the status line and the result
	outR, errR *os.File
	discard    sync.WaitGroup
	tail       tailBuffer // the end of what it wrote before its run, for errors
}

// warmSet holds the waiting interpreters, one per language at most.
type warmSet struct {
	mu       sync.Mutex
	procs    map[string]*warmProc
	starting map[string]bool
}

func (s *Server) handlePrestart(w http.ResponseWriter, r *http.Request) {
	var req agent.PrestartRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: "prestart request: " + err.Error()})
		return
	}
	lang := agent.Interpreter(req.Language)
	if lang == "" {
		writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: fmt.Sprintf("prestart language %q: want python or node", req.Language)})
		return
	}
	imports := req.Imports
	if imports == nil {
		imports = defaultImports[lang]
	}
	for _, m := range imports {
		if !validImport(m) {
			writeError(w, &agent.Error{Code: agent.CodeInvalid, Message: fmt.Sprintf("import %q is not a module name", m)})
			return
		}
	}
	ws := &s.warm
	ws.mu.Lock()
	if ws.procs[lang] != nil || ws.starting[lang] {
		ws.mu.Unlock()
		writeError(w, &agent.Error{Code: agent.CodeExists, Message: "a " + lang + " interpreter is already pre-started"})
		return
	}
	ws.starting[lang] = true
	ws.mu.Unlock()

	ctx, cancel := context.WithTimeout(r.Context(), prestartTimeout)
	defer cancel()
	var wp *warmProc
	var err error
	if req.ZygoteSocket != "" {
		wp, err = s.adoptWarm(ctx, lang, req.ZygoteSocket)
	} else {
		wp, err = s.startWarm(ctx, lang, imports)
	}

	ws.mu.Lock()
	delete(ws.starting, lang)
	if err == nil {
		ws.procs[lang] = wp
	}
	ws.mu.Unlock()
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// startWarm starts an interpreter in waiting mode and returns once it said it is ready.
func (s *Server) startWarm(ctx context.Context, lang string, imports []string) (_ *warmProc, err error) {
	var files []*os.File // every pipe end, closed on failure
	pipe := func() (r, w *os.File) {
		if err != nil {
			return nil, nil
		}
		r, w, err = os.Pipe()
		files = append(files, r, w)
		return r, w
	}
	reqR, reqW := pipe()
	resR, resW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	defer func() {
		if err != nil {
			for _, f := range files {
				if f != nil {
					f.Close()
				}
			}
		}
	}()
	if err != nil {
		return nil, &agent.Error{Code: agent.CodeInternal, Message: "pipes: " + err.Error()}
	}
	env := s.baseEnv()
	argv := harnessArgv(lang)
	if lang == agent.LangNode {
		argv = append(argv, "--") // what follows is the script's, not node's
	}
	argv = append(argv, append([]string{"--lbb-prestart"}, imports...)...)
	exe, startErr := lookPath(argv[0], env["PATH"], s.ws.Path)
	if startErr != "" {
		return nil, &agent.Error{Code: agent.CodeNotSupported, Message: startErr}
	}
	p, err := table.start(startSpec{
		path: exe, argv: argv, env: envList(env), dir: s.ws.Path,
		files:     []uintptr{s.devNull.Fd(), outW.Fd(), errW.Fd(), reqR.Fd(), resW.Fd()},
		pdeathsig: !s.pid1,
	})
	for _, f := range []*os.File{reqR, resW, outW, errW} {
		f.Close()
	}
	files = []*os.File{reqW, resR, outR, errR}
	if err != nil {
		return nil, &agent.Error{Code: agent.CodeInternal, Message: fmt.Sprintf("exec %q: %v", argv[0], err)}
	}
	return s.awaitReady(ctx, &warmProc{lang: lang, p: p, reqW: reqW, resR: resR, outR: outR, errR: errR})
}

// awaitReady discards wp's output until its run and waits for its "ready"; a failure kills it.
func (s *Server) awaitReady(ctx context.Context, wp *warmProc) (*warmProc, error) {
	lang, p := wp.lang, wp.p
	var err error
	wp.discard.Add(2)
	go wp.discardOutput(wp.outR)
	go wp.discardOutput(wp.errR)

	ready := make(chan error, 1)
	go func() { ready <- readReady(wp.resR) }()
	var ex *exitStatus
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	case st := <-p.done:
		ex = &st
		err = <-ready // its fd 4 closed with it
		if err == nil {
			err = errors.New("exited")
		}
	}
	if err != nil {
		wp.kill(ex)
		msg := fmt.Sprintf("pre-starting %s: %v", lang, err)
		if t := wp.tail.String(); t != "" {
			msg += ": " + t
		}
		return nil, &agent.Error{Code: agent.CodeInternal, Message: msg}
	}
	return wp, nil
}

// readReady reads the harness's "ready" line, one byte at a time: nothing after it may be
// consumed here.
func readReady(f *os.File) error {
	var line []byte
	b := make([]byte, 1)
	for len(line) < 64 {
		n, err := f.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				if string(line) != "ready" {
					return fmt.Errorf("the harness said %q, not ready", line)
				}
				return nil
			}
			line = append(line, b[0])
		}
		if err != nil {
			if err == io.EOF {
				return errors.New("the interpreter exited before it was ready")
			}
			return err
		}
	}
	return errors.New("the harness did not say ready")
}

// discardOutput reads f until its read deadline passes (the claim) or it closes.
func (wp *warmProc) discardOutput(f *os.File) {
	defer wp.discard.Done()
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		wp.tail.Write(buf[:n])
		if err != nil {
			return
		}
	}
}

// claim stops discarding output and empties the pipes: from here on, what the interpreter
// writes is its run's. It answers false when the interpreter is gone.
func (wp *warmProc) claim() bool {
	select {
	case st := <-wp.p.done:
		wp.kill(&st)
		return false
	default:
	}
	past := time.Unix(1, 0)
	wp.outR.SetReadDeadline(past)
	wp.errR.SetReadDeadline(past)
	wp.discard.Wait()
	for _, f := range []*os.File{wp.outR, wp.errR} {
		f.SetReadDeadline(time.Time{})
		drainNow(f)
	}
	return true
}

// drainNow reads what f holds now, without waiting for more.
func drainNow(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	var buf [4096]byte
	rc.Read(func(fd uintptr) bool {
		for {
			n, err := syscall.Read(int(fd), buf[:])
			if n <= 0 || err != nil {
				return true // EAGAIN (empty), EOF or an error: done either way
			}
		}
	})
}

// kill ends the interpreter and frees what it holds. st is its exit when already collected.
func (wp *warmProc) kill(st *exitStatus) {
	wp.p.signal(syscall.SIGKILL)
	for _, f := range []*os.File{wp.reqW, wp.resR, wp.outR, wp.errR} {
		f.Close()
	}
	go func() {
		if st == nil {
			<-wp.p.done
		}
		wp.discard.Wait()
		table.release(wp.p)
	}()
}

// takeWarm removes every waiting interpreter: one run per sandbox, so none would serve
// after this run. It answers the one for lang, claimed, if there is one and the run can use
// it; the others are killed.
func (s *Server) takeWarm(lang string, env map[string]string) *warmProc {
	s.warm.mu.Lock()
	procs := s.warm.procs
	if len(procs) == 0 {
		s.warm.mu.Unlock()
		return nil
	}
	s.warm.procs = map[string]*warmProc{}
	s.warm.mu.Unlock()
	var use *warmProc
	for l, wp := range procs {
		if l == lang && !needsFreshInterpreter(env) {
			if wp.claim() { // claim frees one that is gone
				use = wp
			}
			continue
		}
		wp.kill(nil)
	}
	return use
}

// handOver gives a run to its pre-started interpreter: the process gets the run's id and its
// request. Whatever happens, sp.warm is spent after this.
func (s *Server) handOver(sp *procSpec, dir string) (*proc, *os.File, *os.File, error) {
	wp := sp.warm
	sp.warm = nil
	req, err := sp.warmReq(dir, s.listenEnv(sp.env))
	if err == nil {
		err = table.adopt(wp.p, sp.id)
	}
	if err != nil {
		wp.kill(nil)
		return nil, nil, nil, err
	}
	go func() {
		wp.reqW.Write(req)
		wp.reqW.Close()
	}()
	return wp.p, wp.outR, wp.errR, nil
}

// listenEnv is env over what a Listen call adds: what a run in a pre-started interpreter is
// given beyond its own env (the rest of the base environment it had from its start).
func (s *Server) listenEnv(env map[string]string) map[string]string {
	out := s.conns.env()
	if out == nil {
		return env
	}
	maps.Copy(out, env)
	return out
}

// warmRequest is the request a pre-started harness reads: what a spawned one reads, plus
// what exec would have set.
func warmRequest(code string, input, config json.RawMessage, dir string, env map[string]string) ([]byte, error) {
	return json.Marshal(struct {
		Code   string            `json:"code"`
		Input  json.RawMessage   `json:"input"`
		Config json.RawMessage   `json:"config"`
		Cwd    string            `json:"cwd"`
		Env    map[string]string `json:"env,omitempty"`
	}{code, input, config, dir, env})
}

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailMax = 4 << 10

func (t *tailBuffer) Write(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > tailMax {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailMax:]...)
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
