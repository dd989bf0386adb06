package pool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/pool"
	"github.com/littlebigbrain/lbb/internal/runtime"
)

func init() {
	pool.OneCall = func(ctx context.Context, d runtime.Driver, p *pool.Pool, image string, limits runtime.Limits,
		lang, code string, input json.RawMessage, timeout time.Duration) (bool, string, func()) {
		h := hostagent.NewLocal(hostagent.Options{Driver: d, Pool: p, Rootfs: image})
		req := hostagent.RunRequest{SandboxID: ids.New(ids.Sandbox), CommandID: ids.New(ids.Command), Limits: limits,
			Language: lang, Code: code, Input: input, Timeout: timeout, HeadBytes: 1 << 10, TailBytes: 1 << 10}
		release := func() { h.Release(context.Background(), req.SandboxID) }
		out, err := h.Run(ctx, req)
		if err != nil {
			return false, err.Error(), release
		}
		return out.OK, fmt.Sprintf("%+v", out), release
	}
}
