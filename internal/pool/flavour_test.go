package pool

import (
	"errors"
	"fmt"
	"testing"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/local"
)

func TestFlavourFor(t *testing.T) {
	for _, c := range []struct {
		lang, code, want string
	}{
		{"python", "def run(input, config):\n    return sum(input)\n", FlavourLean},
		{"python", "import json, os\nfrom collections import Counter\n", FlavourLean},
		{"python", "import pandas as pd\n", FlavourFull},
		{"py", "import os, numpy.linalg as la\n", FlavourFull},
		{"python", "from scipy import stats\n", FlavourFull},
		{"python", "def run(i, c):\n    import sklearn.linear_model\n", FlavourFull},
		{"python", "import numpyish\n# import pandas is a comment\n", FlavourLean},
		{"node", "const x = require('lodash')\n", FlavourFull},
		{"shell", "echo hi", FlavourFull},
	} {
		if got := FlavourFor(c.lang, c.code); got != c.want {
			t.Errorf("FlavourFor(%q, %q) = %q, want %q", c.lang, c.code, got, c.want)
		}
	}
}

// TestFlavours: a claim takes a slot of its own flavour, counts toward that key's demand,
// and falls back to another flavour of its language before a bare slot; the lean slot's
// interpreter imported nothing.
func TestFlavours(t *testing.T) {
	requirePython(t)
	e := newPool(t, func(o *Options) {
		o.Min = 1
		o.Keys = []Key{
			{Name: "sci", Image: testImage, Language: agent.LangPython, Imports: []string{"wave"}, Limits: testLimits},
			{Name: "lean", Image: testImage, Language: agent.LangPython, Flavour: FlavourLean, Imports: []string{}, Limits: testLimits},
			{Name: "bare", Image: testImage, Limits: testLimits},
		}
	})
	e.fill(t)
	names := func(ks []*keyState) (out []string) {
		for _, k := range ks {
			out = append(out, k.key.Name)
		}
		return out
	}
	for _, c := range []struct{ flavour, want string }{
		{FlavourLean, "[lean sci bare]"},
		{FlavourFull, "[sci lean bare]"},
	} {
		if got := fmt.Sprint(names(e.p.match(spec(), agent.LangPython, c.flavour, ""))); got != c.want {
			t.Errorf("match(python, %q) = %s, want %s", c.flavour, got, c.want)
		}
	}
	l, err := e.p.Acquire(ctxT(t), Request{Spec: spec(), Language: agent.LangPython, Flavour: FlavourLean})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctxT(t))
	got := runIn(t, l, agent.LangPython, "import sys\ndef run(input, config):\n    return 'wave' in sys.modules\n", "null")
	if string(got) != "false" {
		t.Errorf("a lean slot has wave imported: %s", got)
	}
	if w := counter(t, e.reg, "lbb_pool_claims_total", "key", "lean", "path", "warm"); w != 1 {
		t.Errorf("warm claims of the lean key %v, want 1", w)
	}
	if w := counter(t, e.reg, "lbb_pool_claims_total", "key", "sci", "path", "warm"); w != 0 {
		t.Errorf("warm claims of the sci key %v, want 0", w)
	}
}

// TestFullFlavourGoesCold: where cold sandboxes get their interpreter from a zygote, a run
// that imports numpy or pandas takes no lean or bare slot (it would import them in the run)
// but a cold sandbox, whose interpreter the zygote forks; without a zygote it takes the lean
// slot as before.
func TestFullFlavourGoesCold(t *testing.T) {
	requirePython(t)
	for _, zygote := range []bool{true, false} {
		t.Run(fmt.Sprintf("zygote=%v", zygote), func(t *testing.T) {
			e := newPool(t, func(o *Options) {
				// A zygote that fails once asked: the claim still runs, and the pool counts the
				// ask (lbb_pool_zygote_total{path="cold", outcome="fallback"}).
				f := &forking{Driver: o.Driver.(*local.Driver), err: errors.New("no fork here")}
				o.Driver, o.Zygote, o.Min = f, zygote, 1
				o.Keys = []Key{
					{Name: "lean", Image: testImage, Language: agent.LangPython, Flavour: FlavourLean, Imports: []string{}, Limits: testLimits},
					{Name: "bare", Image: testImage, Limits: testLimits},
				}
			})
			e.fill(t)
			sp := spec()
			l, err := e.p.Acquire(ctxT(t), Request{Spec: sp, Language: agent.LangPython, Flavour: FlavourFull})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctxT(t))
			cold := l.Sandbox.ID() == sp.ID
			if cold != zygote {
				t.Errorf("served cold: %v, want %v", cold, zygote)
			}
			wantForks := 0.0 // for cold sandboxes (the slots' builds ask too)
			if zygote {
				wantForks = 1
			}
			if n := zygoteCount(e.p, "cold", "fallback"); n != wantForks {
				t.Errorf("%v forks asked for cold sandboxes, want %v", n, wantForks)
			}
			// The claim counts toward the best key there is, warm or cold.
			path := map[bool]string{true: "cold", false: "warm"}[zygote]
			if n := counter(t, e.reg, "lbb_pool_claims_total", "key", "lean", "path", path); n != 1 {
				t.Errorf("claims{key=lean, path=%s} = %v, want 1", path, n)
			}
			// A lean run still takes the lean slot.
			if zygote {
				l2, err := e.p.Acquire(ctxT(t), Request{Spec: spec(), Language: agent.LangPython, Flavour: FlavourLean})
				if err != nil {
					t.Fatal(err)
				}
				defer l2.Release(ctxT(t))
				if !runWarm(t, l2) {
					t.Error("a lean run did not take the lean slot")
				}
			}
		})
	}
}

// TestLayerClaimKeepsZygote: a cold python sandbox with a template layer asks the zygote for
// nothing (its root is not the image alone), and does not make the runtime's other cold
// sandboxes go without one.
func TestLayerClaimKeepsZygote(t *testing.T) {
	requirePython(t)
	var f *forking
	e := newPool(t, func(o *Options) {
		// What the ns driver answers for a sandbox with a layer, and gvisor for any.
		f = &forking{Driver: o.Driver.(*local.Driver), err: errdefs.New(errdefs.ClassConflict, errdefs.CodeNotSupported, "no zygote")}
		o.Driver, o.Zygote = f, true
	}) // never started: every claim is cold
	layered := spec()
	layered.Layer = "/layers/x/layer"
	for i, sp := range []runtime.Spec{layered, spec()} {
		before := f.calls.Load()
		l, err := e.p.Acquire(ctxT(t), Request{Spec: sp, Language: agent.LangPython, Flavour: FlavourLean})
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctxT(t))
		if n, want := f.calls.Load()-before, int32(i); n != want {
			t.Errorf("claim %d (layer %q) asked for %d forks, want %d", i, sp.Layer, n, want)
		}
	}
}
