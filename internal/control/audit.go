package control

import (
	"context"
	"sync"

	"github.com/littlebigbrain/lbb/internal/store"
)

// PendingAudit is the audit entry of a call in progress. Whoever takes it first writes it:
// a one-call run takes it into the transaction that records the run's end, so that the
// answer waits for one durable commit instead of two; the API edge takes it for every other
// call (and for a run answered 202 before it ended, or replayed).
type PendingAudit struct {
	mu    sync.Mutex
	entry store.AuditEntry
	taken bool
}

// NewPendingAudit holds e until it is taken.
func NewPendingAudit(e store.AuditEntry) *PendingAudit { return &PendingAudit{entry: e} }

// Take answers the entry once; later calls answer false.
func (p *PendingAudit) Take() (store.AuditEntry, bool) {
	if p == nil {
		return store.AuditEntry{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.taken {
		return store.AuditEntry{}, false
	}
	p.taken = true
	return p.entry, true
}

// Untake hands back an entry taken into a transaction that did not commit, for the API
// edge to write. Harmless when it was not taken.
func (p *PendingAudit) Untake() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.taken = false
	p.mu.Unlock()
}

type pendingAuditKey struct{}

// WithPendingAudit attaches p to the call's context.
func WithPendingAudit(ctx context.Context, p *PendingAudit) context.Context {
	return context.WithValue(ctx, pendingAuditKey{}, p)
}

func pendingAudit(ctx context.Context) *PendingAudit {
	p, _ := ctx.Value(pendingAuditKey{}).(*PendingAudit)
	return p
}
