package lbb_test

import (
	"testing"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func TestOutputString(t *testing.T) {
	for _, tc := range []struct {
		o    lbb.Output
		want string
	}{
		{lbb.Output{Head: "abc", Bytes: 3}, "abc"},
		{lbb.Output{Head: "abc", Tail: "def", Bytes: 6}, "abcdef"},
		{lbb.Output{Head: "abc", Tail: "xyz", Bytes: 100}, "abc\n…\nxyz"},
	} {
		if got := tc.o.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.o, got, tc.want)
		}
	}
}
