package control

import (
	"context"
	"time"

	"github.com/littlebigbrain/lbb/internal/store"
)

// GetCommand returns a command record; with wait > 0 it first waits, up to wait, for the
// command to end.
func (s *Service) GetCommand(ctx context.Context, graph, id string, wait time.Duration) (store.Command, error) {
	c, err := s.st.GetCommand(ctx, graph, id)
	if err != nil || store.CommandDone(c.Status) || wait <= 0 {
		return c, err
	}
	wait = min(wait, s.cfg.MaxWait)
	s.mu.Lock()
	inf := s.inflight[id]
	s.mu.Unlock()
	if inf != nil {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-inf.done:
		case <-t.C:
		case <-ctx.Done():
			return c, ctx.Err()
		}
	} else if err := s.pollDone(ctx, graph, id, wait); err != nil {
		return c, err
	}
	return s.st.GetCommand(ctx, graph, id)
}
