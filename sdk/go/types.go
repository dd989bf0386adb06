package lbb

import "encoding/json"

// The wire types (Sandbox, Command, Template, …) are generated from the API's OpenAPI
// document into wire.gen.go; see generate.go. This file holds what the SDK adds to them.

// String is the output as kept: the head, and the tail when there is more.
func (o Output) String() string {
	if int64(len(o.Head)) >= o.Bytes {
		return o.Head
	}
	if int64(len(o.Head)+len(o.Tail)) >= o.Bytes {
		return o.Head + o.Tail[len(o.Head)+len(o.Tail)-int(o.Bytes):]
	}
	return o.Head + "\n…\n" + o.Tail
}

// Command statuses.
const (
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusTimedOut  = "timed_out"
	StatusKilled    = "killed"
	StatusLost      = "lost"
	StatusOOM       = "oom"
	StatusDiskFull  = "disk_full"
)

// Done reports whether a command status is final.
func Done(status string) bool { return status != StatusQueued && status != StatusRunning }

// Run is the answer to a one-call run, and how the call went.
type Run struct {
	RunResult

	// Replayed says the server answered from an earlier call with the same idempotency key.
	Replayed bool `json:"-"`
	// IdempotencyKey is the key the call was sent with.
	IdempotencyKey string `json:"-"`
}

// Decode decodes the run's result into v.
func (r *Run) Decode(v any) error { return json.Unmarshal(r.Result, v) }

// File is a File of the graph: content-addressed, outliving sandboxes, naming its origin.
type File struct {
	GraphFile

	// Replayed says the server answered from an earlier call with the same idempotency key.
	Replayed bool `json:"-"`
}
