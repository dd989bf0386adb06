package main

import (
	"flag"
	"io"
	"testing"
)

// TestURLFlag: --url takes http(s) URLs only, so an empty shell variable before another flag
// is an error instead of that flag taken for the URL.
func TestURLFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--url", "http://127.0.0.1:7700"}, true},
		{[]string{"--url", "https://lbb.example:443/"}, true},
		{[]string{"--url", "--n", "5"}, false},
		{[]string{"--url", ""}, false},
		{[]string{"--url", "127.0.0.1:7700"}, false},
		{[]string{"--url", "ftp://x"}, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cf := &clientFlags{}
		cf.register(fs)
		fs.Int("n", 0, "")
		err := fs.Parse(tc.args)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v, want ok %v", tc.args, err, tc.ok)
		}
		if tc.ok && cf.url != tc.args[1] {
			t.Errorf("%q: url %q", tc.args, cf.url)
		}
	}
}
