package pool

import (
	"fmt"
	"testing"

	"github.com/littlebigbrain/lbb/internal/agent"
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
