package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/idempotency"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/store"
)

// A run's result is kept once: in its command record. A result larger than the server's
// --max-result-bytes is kept as a File of the graph instead (origin: the command), which
// the record and the answer name (result_file), with result_truncated and result_bytes; the
// caller downloads it (GET /v1/files/{id}/content) and may delete it like any File. It
// counts toward the graph's Files quotas; when they have no room, the record says so in
// error and keeps no result. The answer a key replays is stored without the result, which
// the replay reads back from the record.

// stageResult takes a result too large for a record out of cmd and stages its bytes as a
// blob (nil when the result fits, or when there is nowhere to keep it: cmd.Error says why).
func (s *Service) stageResult(ctx context.Context, cmd *store.Command) *blobs.Staged {
	n := int64(len(cmd.Result))
	if n <= s.cfg.MaxResultBytes {
		return nil
	}
	result := cmd.Result
	cmd.Result, cmd.ResultTruncated, cmd.ResultBytes = nil, true, n
	bs, err := s.blobStore()
	var st *blobs.Staged
	if err == nil {
		st, err = bs.Stage(ctx, bytes.NewReader(result), 0)
	}
	if err != nil {
		s.noResultFile(cmd, err)
		return nil
	}
	return st
}

// keepResult records the staged result of cmd as a File of its graph, in the transaction q
// that records cmd's end.
func (s *Service) keepResult(ctx context.Context, q store.Queries, cmd *store.Command, st *blobs.Staged) {
	if st == nil {
		return
	}
	f := store.File{ID: ids.New(ids.File), Graph: cmd.Graph, SHA256: st.SHA256, Size: st.Size, Name: cmd.ID + "-result.json",
		Origin: store.FileOrigin{Kind: store.FileFromResult, Command: cmd.ID, Sandbox: cmd.SandboxID, Key: cmd.Origin.Key,
			Grant: cmd.Origin.Grant, Workflow: cmd.Origin.Workflow, Run: cmd.Origin.Run, Step: cmd.Origin.Step, Attempt: cmd.Origin.Attempt}, CreatedAt: s.now()}
	if err := s.createFile(ctx, q, s.blobs, f, st); err != nil {
		s.noResultFile(cmd, err)
		return
	}
	cmd.ResultFile = f.ID
}

// noResultFile says in cmd's error why its large result was not kept.
func (s *Service) noResultFile(cmd *store.Command, err error) {
	msg := fmt.Sprintf("the result (%d bytes) is larger than this server keeps in a record (--max-result-bytes %d) and was not kept as a File: %v",
		cmd.ResultBytes, s.cfg.MaxResultBytes, err)
	if cmd.Error != "" {
		msg = cmd.Error + "; " + msg
	}
	cmd.Error = msg
	s.log.Warn("a run's result was not kept", "graph", cmd.Graph, "command", cmd.ID, "bytes", cmd.ResultBytes, "err", err)
}

func (s *Service) discard(st *blobs.Staged) {
	if st != nil && s.blobs != nil {
		s.blobs.Discard(st)
	}
}

// answerRun is the answer of a run whose records are cmd and sb.
func (s *Service) answerRun(cmd store.Command, sb store.Sandbox) Response {
	body, err := json.Marshal(render(cmd, sb))
	if err != nil {
		s.log.Error("rendering a run's answer", "command", cmd.ID, "err", err)
	}
	return Response{Outcome: idempotency.Done, Body: body}
}

// runAnswer says whether the answer a key keeps is a run's (RunResult), whose result the
// command record keeps.
func runAnswer(r store.Idempotency) bool {
	return r.CommandID != "" && (r.Route == RouteCreateSandbox || r.Route == RouteRunIn)
}

// withoutResult is a run's answer as its key keeps it: without the result.
func withoutResult(body []byte) []byte {
	var rr RunResult
	if json.Unmarshal(body, &rr) != nil || rr.Result == nil {
		return body
	}
	rr.Result = nil
	out, err := json.Marshal(rr)
	if err != nil {
		return body
	}
	return out
}

// storedAnswer is the answer a finished key holds, a run's result read back from its
// command record (gone after the retention: the answer then has none).
func (s *Service) storedAnswer(ctx context.Context, r store.Idempotency) Response {
	resp := idempotency.Stored(r)
	if !runAnswer(r) {
		return resp
	}
	cmd, err := s.st.GetCommand(ctx, r.Graph, r.CommandID)
	if err != nil || cmd.Result == nil {
		return resp
	}
	var rr RunResult
	if json.Unmarshal(resp.Body, &rr) != nil {
		return resp
	}
	rr.Result = cmd.Result
	if body, err := json.Marshal(rr); err == nil {
		resp.Body = body
	}
	return resp
}
