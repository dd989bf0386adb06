// Package codeint is the code interpreter's wire between the control plane and a context's
// driver inside a sandbox: the driver programs (a Python one on jupyter_client and Debian's
// ipykernel; a Node one on node's own repl machinery, for top-level await and the last
// expression's value), their argv, and the one-JSON-object-a-line protocol they speak on stdin and
// stdout. The driver runs as an ordinary command of the sandbox (started by the host agent,
// its output held for one reader), so contexts need nothing new of the host agent, the guest
// agent or the drivers, and work alike on every isolation and over a remote host agent.
//
// Why jupyter_client inside the sandbox rather than ZeroMQ in Go on the host: the kernel's
// sockets then never leave the sandbox (it has no network device to reach them by), and the
// Jupyter client that every notebook uses does the messaging protocol, interrupts and restarts.
package codeint

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
)

var (
	//go:embed kernel.py
	pythonDriver string
	//go:embed kernel.js
	nodeDriver string
	//go:embed kernel_sh.py
	shellDriver string
)

// Languages are the languages a context may run.
var Languages = []string{"python", "node", "shell"}

// Canonical is language's canonical name: "bash" is "shell".
func Canonical(language string) string {
	if language == "bash" {
		return "shell"
	}
	return language
}

// Argv is the command that starts a context's driver for language.
func Argv(language string) ([]string, error) {
	switch Canonical(language) {
	case "python", "":
		return []string{"python3", "-u", "-c", pythonDriver}, nil
	case "node":
		return []string{"node", "-e", nodeDriver}, nil
	case "shell":
		// One bash for the context, kept by a small Python driver (python3 is in every image):
		// cwd, exports, functions and aliases stay from cell to cell.
		return []string{"python3", "-u", "-c", shellDriver}, nil
	}
	return nil, fmt.Errorf("no code context for language %q: want %v", language, Languages)
}

// Request is one cell for a driver: a line on its stdin.
type Request struct {
	ID        string `json:"id"`
	Code      string `json:"code"`
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
}

// Line is the request as the driver reads it.
func (r Request) Line() []byte {
	b, _ := json.Marshal(r) // strings and an int always marshal
	return append(b, '\n')
}

// Event types, in the order a cell emits them: output and results as they come, then end.
const (
	EventReady   = "ready"
	EventFatal   = "fatal"
	EventStdout  = "stdout"
	EventStderr  = "stderr"
	EventResult  = "result"
	EventDisplay = "display"
	EventError   = "error"
	EventEnd     = "end"
)

// Event is a line a driver writes.
type Event struct {
	ID   string `json:"id,omitempty"`
	Type string `json:"type"`
	// Text of stdout and stderr.
	Text string `json:"text,omitempty"`
	// Data of result and display: MIME type → value (text, base64 for images, JSON).
	Data map[string]json.RawMessage `json:"data,omitempty"`
	// ExecutionCount of result and end.
	ExecutionCount *int `json:"execution_count,omitempty"`
	// Name, Value and Traceback of error (Value also of fatal).
	Name      string   `json:"name,omitempty"`
	Value     string   `json:"value,omitempty"`
	Traceback []string `json:"traceback,omitempty"`
	// Status of end: ok, error, timeout, died.
	Status string `json:"status,omitempty"`
}

// Lines splits a stream of driver output into events: it keeps a partial last line for the
// next call. A line that is not an event is skipped (nothing else writes there).
type Lines struct{ buf []byte }

// Feed adds p and answers the complete events it ends.
func (l *Lines) Feed(p []byte) []Event {
	l.buf = append(l.buf, p...)
	var evs []Event
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return evs
		}
		line := l.buf[:i]
		var ev Event
		if json.Unmarshal(line, &ev) == nil && ev.Type != "" {
			evs = append(evs, ev)
		}
		l.buf = l.buf[i+1:]
	}
}

// MIMETypes lists a bundle's types, sorted.
func MIMETypes(data map[string]json.RawMessage) []string {
	ts := make([]string, 0, len(data))
	for t := range data {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

// PythonReady is what the line of the Python driver's ready event begins with (its compact
// separators): a warm pool that starts the driver waits for it (pool.Kernel.Ready).
var PythonReady = []byte(`{"type":"ready"`)
