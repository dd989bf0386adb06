package pool

import (
	"context"
	"encoding/json"
	"time"

	"github.com/littlebigbrain/lbb/internal/runtime"
)

// OneCall runs code once the way a one-call run does (hostagent.Local.Run on the pool: stats,
// output capture) and answers whether it succeeded, what it ended as, and release, which
// destroys its sandbox. hostagent imports pool, so hostagent_test.go (package pool_test)
// sets it.
var OneCall func(ctx context.Context, d runtime.Driver, p *Pool, image string, limits runtime.Limits,
	lang, code string, input json.RawMessage, timeout time.Duration) (ok bool, end string, release func())
