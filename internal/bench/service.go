package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

const pySum = "def run(input, config):\n    return sum(input)\n"

// PandasSum is the one-call pandas run the benchmark times.
const PandasSum = "import pandas as pd\n\ndef run(input, config):\n    return pd.DataFrame(input).sum().to_dict()\n"

// PandasInput is its input.
var PandasInput = []map[string]int{{"a": 1, "b": 2}, {"a": 3, "b": 4}}

// OneCall times n one-call runs of code through the API, one at a time, and checks each
// answer with ok.
func OneCall(ctx context.Context, c *lbb.Client, name string, n int, p lbb.RunParams, ok func(*lbb.Run) error) Sample {
	return OneCallPaced(ctx, c, name, n, p, ok, nil)
}

// OneCallPaced is OneCall with an untimed wait before each run (for the warm pool to refill).
func OneCallPaced(ctx context.Context, c *lbb.Client, name string, n int, p lbb.RunParams, ok func(*lbb.Run) error, before func()) Sample {
	s := Sample{Name: name}
	for range n {
		if before != nil {
			before()
		}
		t := Time(name, 1, func() error { return oneCall(ctx, c, p, ok) })
		s.Durs = append(s.Durs, t.Durs...)
		s.Errors += t.Errors
	}
	return s
}

// WaitPoolReady polls the server's /metrics (with apiKey) until lbb_pool_ready for key is
// at least want, or d passes.
func WaitPoolReady(ctx context.Context, baseURL, apiKey, key string, want int, d time.Duration) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		if poolReady(baseURL, apiKey, key) >= want {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func poolReady(baseURL, apiKey, key string) int {
	return int(poolGauges(baseURL, apiKey, "lbb_pool_ready")[key])
}

// poolGauges reads the gauge name of every pool key from the server's /metrics.
func poolGauges(baseURL, apiKey, name string) map[string]float64 {
	out := map[string]float64{}
	req, err := http.NewRequest("GET", baseURL+"/metrics", nil)
	if err != nil {
		return out
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	prefix := name + `{key="`
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			key, v, ok := strings.Cut(rest, `"} `)
			if ok {
				out[key], _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	return out
}

// WaitPoolSettled polls the server's /metrics until every pool key has as many slots ready
// as its refill aims for, or d passes: what a metered figure waits for before it starts,
// so that it pays for no refill of before, and after it ends, so that it pays for its own.
func WaitPoolSettled(ctx context.Context, baseURL, apiKey string, d time.Duration) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		ready, target := poolGauges(baseURL, apiKey, "lbb_pool_ready"), poolGauges(baseURL, apiKey, "lbb_pool_target")
		settled := len(target) > 0
		for k, t := range target {
			if ready[k] < t {
				settled = false
			}
		}
		if settled {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func oneCall(ctx context.Context, c *lbb.Client, p lbb.RunParams, ok func(*lbb.Run) error) error {
	{
		r, err := c.Sandboxes.Run(ctx, p)
		if err != nil {
			return err
		}
		if !r.OK {
			return fmt.Errorf("run failed: %s %s", r.Status, r.Stderr.Tail)
		}
		if ok != nil {
			return ok(r)
		}
		return nil
	}
}

// Sustained runs one-call runs of sum(input) from clients goroutines for d and returns the
// latencies and the rate.
func Sustained(ctx context.Context, c *lbb.Client, clients int, d time.Duration) (Sample, float64) {
	return SustainedRuns(ctx, c, clients, d, lbb.RunParams{Code: pySum, Input: []int{1, 2, 3}}, nil)
}

// WaitPoolReadyPrefix is WaitPoolReady for the keys whose name starts with prefix (the
// warm pool's keys of a template layer, "layer-<key>/…"), their ready slots summed.
func WaitPoolReadyPrefix(ctx context.Context, baseURL, apiKey, prefix string, want int, d time.Duration) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		n := 0.0
		for k, v := range poolGauges(baseURL, apiKey, "lbb_pool_ready") {
			if strings.HasPrefix(k, prefix) {
				n += v
			}
		}
		if int(n) >= want {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
