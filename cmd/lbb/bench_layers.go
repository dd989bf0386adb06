package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/littlebigbrain/lbb/internal/bench"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// Templates for the layered rows: one whose image carries a layer (a run step leaves a file
// the code looks for) and one of the same code on the bare base.
const (
	benchLayerCode   = "import os\ndef run(input, config):\n    return [sum(input), os.path.exists('/etc/lbb-bench-layer')]\n"
	benchTplBase     = "bench-base"
	benchTplLayer    = "bench-layer"
	benchLayerBuildT = 5 * time.Minute
)

// saveBenchTemplates saves both templates on c and waits for the layer's build; it answers
// the layer's key.
func saveBenchTemplates(ctx context.Context, c *lbb.Client) (string, error) {
	for _, p := range []lbb.TemplateParams{
		{Name: benchTplBase, Code: benchLayerCode},
		{Name: benchTplLayer, Code: benchLayerCode, Image: &lbb.ImageRecipe{Run: []string{"touch /etc/lbb-bench-layer"}}},
	} {
		if _, err := c.Sandboxes.Templates.Create(ctx, p); err != nil {
			return "", fmt.Errorf("save template %s: %w", p.Name, err)
		}
	}
	deadline := time.Now().Add(benchLayerBuildT)
	for {
		v, err := c.Sandboxes.Templates.Build(ctx, benchTplLayer)
		if err != nil {
			return "", err
		}
		switch v.Status {
		case "ready":
			return v.Layer, nil
		case "failed":
			return "", fmt.Errorf("the layer's build failed at %s: %s", v.Step, v.Error)
		}
		if time.Now().After(deadline) {
			return "", errors.New("the layer's build did not end in time")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// layerRows are one-call runs of a template with a layer, warm (the pool's slots of the layer,
// which its first runs ask for) and cold (the server with the pool off), beside the same code
// in a template without one.
func (b serviceBench) layerRows(ctx context.Context, base []bench.Sample, notes *[]string) (rows []bench.Row) {
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	n := b.n
	layer, err := saveBenchTemplates(ctx, b.c)
	if err != nil {
		*notes = append(*notes, "template layer rows: "+err.Error())
		return nil
	}
	in := []int{1, 2, 3}
	plain := lbb.RunParams{Template: benchTplBase, Input: in}
	layered := lbb.RunParams{Template: benchTplLayer, Input: in}
	// The first run of the layer gives the pool its key; demand does the rest.
	if s := bench.OneCall(ctx, b.c, "prime", 2, layered, wantJSON("[6, true]")); s.Errors > 0 {
		*notes = append(*notes, "template layer rows: a run of the layered template failed")
		return nil
	}
	waitLayer := func() {
		if !bench.WaitPoolReadyPrefix(ctx, b.url, b.key, "layer-"+layer[:min(12, len(layer))], 1, 20*time.Second) {
			*notes = append(*notes, "a warm run of the layered template found no ready slot of its layer within 20 s")
		}
	}
	waitPlain := func() {
		if !bench.WaitPoolReady(ctx, b.url, b.key, "python", 1, 10*time.Second) {
			*notes = append(*notes, "a warm run of the plain template found no ready python slot within 10 s")
		}
	}
	logf("one-call run of a template with a layer, warm (%d times)…", n)
	rows = append(rows, bench.Row{Metric: "one-call template with a layer, warm", LBB: bench.OneCallPaced(ctx, b.c, "lbb", n, layered, wantJSON("[6, true]"), waitLayer), Baselines: base})
	logf("one-call run of the same code in a template without one, warm (%d times)…", n)
	rows = append(rows, bench.Row{Metric: "one-call template without a layer, warm", LBB: bench.OneCallPaced(ctx, b.c, "lbb", n, plain, wantJSON("[6, false]"), waitPlain), Baselines: base})
	if b.cold == nil {
		return rows
	}
	if _, err := saveBenchTemplates(ctx, b.cold); err != nil {
		*notes = append(*notes, "template layer rows, cold: "+err.Error())
		return rows
	}
	logf("one-call run of a template with a layer, cold: pool off (%d times)…", n)
	rows = append(rows, bench.Row{Metric: "one-call template with a layer, cold", LBB: bench.OneCall(ctx, b.cold, "lbb", n, layered, wantJSON("[6, true]")), Baselines: base})
	logf("one-call run of a template without one, cold: pool off (%d times)…", n)
	rows = append(rows, bench.Row{Metric: "one-call template without a layer, cold", LBB: bench.OneCall(ctx, b.cold, "lbb", n, plain, wantJSON("[6, false]")), Baselines: base})
	return rows
}
