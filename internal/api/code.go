package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	"github.com/littlebigbrain/lbb/internal/codeint"
	"github.com/littlebigbrain/lbb/internal/control"
)

// Code contexts and cells (control/contexts.go).

func (s *Server) createContext(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	c.sandbox = id
	var req control.ContextRequest
	if _, err := s.optionalBody(w, r, &req); err != nil {
		return err
	}
	cc, err := s.svc.CreateContext(r.Context(), c.caller, id, req)
	if err == nil {
		c.target = cc.ID
	}
	return answer(w, http.StatusCreated, cc, err)
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	c.sandbox = id
	ccs, err := s.svc.ListContexts(r.Context(), c.caller.Graph, id)
	return answer(w, http.StatusOK, newList(ccs, ""), err)
}

func (s *Server) restartContext(w http.ResponseWriter, r *http.Request, c *call) error {
	id, cid := r.PathValue("id"), r.PathValue("context")
	c.sandbox, c.target = id, cid
	cc, err := s.svc.RestartContext(r.Context(), c.caller.Graph, id, cid)
	return answer(w, http.StatusOK, cc, err)
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request, c *call) error {
	id, cid := r.PathValue("id"), r.PathValue("context")
	c.sandbox, c.target = id, cid
	cc, err := s.svc.DeleteContext(r.Context(), c.caller.Graph, id, cid)
	return answer(w, http.StatusOK, cc, err)
}

// runCode runs a cell. Asked for a stream (Accept: text/event-stream, or "stream": true), it
// answers one: events stdout and stderr ({"text"}), result and display ({"data",
// "execution_count"}), error ({"name", "value", "traceback"}) as the cell makes them, then end
// with the whole answer (the buffered answer's body). A replayed call streams end alone.
func (s *Server) runCode(w http.ResponseWriter, r *http.Request, c *call) error {
	var (
		mu        sync.Mutex
		sw        *sseWriter
		streaming bool
	)
	start := func() *sseWriter {
		if sw == nil {
			sw = newSSE(w, r)
		}
		return sw
	}
	resp, err := sandboxDo(s, w, r, c, "code", false,
		func(ctx context.Context, caller control.Caller, id string, req control.CodeRequest, key, hash string) (control.Response, error) {
			var on func(codeint.Event)
			streaming = req.Stream || strings.Contains(r.Header.Get("Accept"), "text/event-stream")
			if streaming {
				on = func(ev codeint.Event) {
					mu.Lock()
					defer mu.Unlock()
					sw := start()
					switch ev.Type {
					case codeint.EventStdout, codeint.EventStderr:
						sw.event(ev.Type, "", marshalNoEscape(map[string]string{"text": ev.Text}))
					case codeint.EventResult, codeint.EventDisplay:
						sw.event(ev.Type, "", marshalNoEscape(control.CodeOutput{Type: ev.Type, Data: ev.Data, ExecutionCount: ev.ExecutionCount}))
					case codeint.EventError:
						tb := ev.Traceback
						if tb == nil {
							tb = []string{}
						}
						sw.event(ev.Type, "", marshalNoEscape(control.CodeError{Name: ev.Name, Value: ev.Value, Traceback: tb}))
					}
				}
			}
			return s.svc.RunCode(ctx, caller, id, req, key, hash, on)
		})
	mu.Lock()
	defer mu.Unlock()
	if sw == nil && (err != nil || !streaming) {
		if err != nil {
			return err
		}
		var rec map[string]any
		if json.Unmarshal(resp.Body, &rec) == nil {
			c.target, _ = rec["command"].(string)
		}
		writeResponse(w, resp)
		return nil
	}
	if resp.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	sw = start()
	if err != nil {
		s.errorEvent(sw, c, err)
		return nil
	}
	var rec map[string]any
	if json.Unmarshal(resp.Body, &rec) == nil {
		c.target, _ = rec["command"].(string)
	}
	sw.event("end", "", resp.Body)
	return nil
}
