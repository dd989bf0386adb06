package pool

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/agent"
)

// echoKernel says it is ready, then answers each line of its stdin in upper case.
var echoKernel = &Kernel{Name: "echo", Ready: []byte(`{"type":"ready"`), Argv: []string{"python3", "-u", "-c",
	"import sys\nprint('{\"type\":\"ready\"}')\nfor l in sys.stdin:\n    print(l.upper(), end='')\n"}}

// TestKernelSlots: a slot of a key with a Kernel is built with the kernel running and ready;
// only a Handover that names the kernel takes it (one-call runs and bare handovers never
// do), and its claimant gets the kernel's output from its start and its stdin.
func TestKernelSlots(t *testing.T) {
	requirePython(t)
	e := newPool(t, func(o *Options) {
		o.Min = 1
		o.Keys = []Key{
			{Name: "kernel", Image: testImage, Limits: testLimits, Kernel: echoKernel},
			{Name: "bare", Image: testImage, Limits: testLimits},
			{Name: "py", Image: testImage, Language: agent.LangPython, Imports: []string{}, Limits: testLimits},
		}
	})
	e.fill(t)
	names := func(ks []*keyState) string {
		var out []string
		for _, k := range ks {
			out = append(out, k.key.Name)
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct{ lang, kernel, want string }{
		{agent.LangPython, "", "[py bare]"},
		{"", "", "[bare]"},
		{"", "echo", "[kernel bare]"},
		{"", "other", "[bare]"},
	} {
		if got := names(e.p.match(spec(), c.lang, "", c.kernel)); got != c.want {
			t.Errorf("match(%q, kernel %q) = %s, want %s", c.lang, c.kernel, got, c.want)
		}
	}
	l, err := e.p.Handover(ctxT(t), Request{Spec: spec(), Kernel: "echo"})
	if err != nil || l == nil || l.Kernel == nil {
		t.Fatalf("handover: %v %v", l, err)
	}
	defer l.Release(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan error, 1)
	go func() { _, err := l.Kernel.Wait(&out, &errOut); done <- err }()
	if _, err := l.Kernel.Stdin.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	l.Kernel.Stdin.Close()
	select {
	case err := <-done:
		if err != nil || out.String() != "{\"type\":\"ready\"}\nHI\n" {
			t.Fatalf("the kernel's output: %q %q %v", out.String(), errOut.String(), err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the kernel did not end with its stdin")
	}
	// A bare handover does not take a kernel slot.
	b, err := e.p.Handover(ctxT(t), Request{Spec: spec()})
	if err != nil || b == nil || b.Kernel != nil {
		t.Fatalf("bare handover: %v %v", b, err)
	}
	b.Release(context.Background())
}
