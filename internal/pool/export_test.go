package pool

import (
	"context"
	"encoding/json"
	"time"

	"github.com/littlebigbrain/lbb/internal/runtime"
)

// OneCall runs code once the way a one-call run does (hostagent.Local.Run on the pool: stats,
// output capture) and answers whether it succeeded, and what it ended as. hostagent imports
// pool, so hostagent_test.go (package pool_test) sets it.
var OneCall func(ctx context.Context, d runtime.Driver, p *Pool, image string, limits runtime.Limits,
	lang, code string, input json.RawMessage, timeout time.Duration) (ok bool, end string)
