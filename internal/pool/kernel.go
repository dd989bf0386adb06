package pool

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/ids"
)

// Kernel is a command a key's slots start once their agent answers and keep running for
// their claimant: a code context's interpreter (internal/codeint), whose start (an
// interpreter, a Jupyter kernel) is the slow part of a first cell. A claim asks for it by
// Name (Request.Kernel) and takes it with the slot (Lease.Kernel).
type Kernel struct {
	Name string
	Argv []string
	// Ready is what a line of its stdout holds once it is ready.
	Ready []byte
}

// KernelTimeout is the guest agent's timeout of a kernel: it lives as long as its sandbox.
const KernelTimeout = 365 * 24 * time.Hour

// Running is a kernel a slot started: its process in the guest agent (ID) with its stdin
// open, and its output kept from its start for the first Wait.
type Running struct {
	ID    string
	Stdin *io.PipeWriter

	stdout, stderr relay
	done           chan struct{}
	exit           agent.Exit
	err            error
}

// startKernel starts k in the sandbox of c and waits until it is ready. Its stream lives on
// c (not ctx): it ends with the sandbox, or when its claimant kills it.
func startKernel(ctx context.Context, c *agent.Client, k *Kernel) (*Running, error) {
	pr, pw := io.Pipe()
	r := &Running{ID: ids.New(ids.Command), Stdin: pw, done: make(chan struct{})}
	ready := make(chan struct{})
	r.stdout.ready, r.stdout.seen = k.Ready, ready
	p, err := c.Exec(context.Background(), agent.ExecRequest{ID: r.ID, Argv: k.Argv, TimeoutMs: KernelTimeout.Milliseconds(), Detachable: true}, pr)
	if err != nil {
		return nil, fmt.Errorf("starting kernel %s: %w", k.Name, err)
	}
	go func() {
		r.exit, r.err = p.Wait(&r.stdout, &r.stderr)
		pw.CloseWithError(io.ErrClosedPipe)
		close(r.done)
	}()
	select {
	case <-ready:
		return r, nil
	case <-r.done:
		return nil, fmt.Errorf("kernel %s ended before it was ready: %v %v: %s", k.Name, r.exit, r.err, r.stderr.buf.Bytes())
	case <-ctx.Done():
		pw.Close()
		return nil, fmt.Errorf("kernel %s not ready: %w", k.Name, ctx.Err())
	}
}

// Wait forwards the kernel's output, from its start, to stdout and stderr, and answers how
// it ended. Call it once.
func (r *Running) Wait(stdout, stderr io.Writer) (agent.Exit, error) {
	r.stdout.attach(stdout)
	r.stderr.attach(stderr)
	<-r.done
	return r.exit, r.err
}

// relay keeps what is written until a writer attaches, then passes it on. Until then it
// watches for ready in what it keeps.
type relay struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	w     io.Writer
	ready []byte
	seen  chan struct{}
}

func (r *relay) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil {
		return r.w.Write(p)
	}
	r.buf.Write(p)
	if r.seen != nil && bytes.Contains(r.buf.Bytes(), r.ready) {
		close(r.seen)
		r.seen = nil
	}
	return len(p), nil
}

func (r *relay) attach(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w.Write(r.buf.Bytes())
	r.buf = bytes.Buffer{}
	r.w = w
}
