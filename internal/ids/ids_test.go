package ids

import (
	"strings"
	"testing"
	"time"
)

func TestNew(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for range 1000 {
		id := New(Sandbox)
		if !Valid(Sandbox, id) {
			t.Fatalf("New gave invalid id %q", id)
		}
		if id != strings.ToLower(id) {
			t.Fatalf("id %q is not lower case", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		if id <= prev {
			t.Fatalf("ids not increasing: %q then %q", prev, id)
		}
		seen[id], prev = true, id
	}
}

func TestPrefixUnderscore(t *testing.T) {
	if id := New("sbx"); !strings.HasPrefix(id, "sbx_") || !Valid(Sandbox, id) {
		t.Fatalf("New(\"sbx\") = %q", id)
	}
}

func TestValid(t *testing.T) {
	good := New(Command)
	for _, tc := range []struct {
		prefix, s string
		want      bool
	}{
		{Command, good, true},
		{"cmd", good, true},
		{Sandbox, good, false},
		{Command, "cmd_", false},
		{Command, good + "x", false},
		{Command, "cmd_zzzzzzzzzzzzzzzzzzzzzzzzzz", false},
		{Command, strings.ToUpper(good), false},
	} {
		if got := Valid(tc.prefix, tc.s); got != tc.want {
			t.Errorf("Valid(%q, %q) = %v, want %v", tc.prefix, tc.s, got, tc.want)
		}
	}
}

func TestTime(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	if got := Time(NewAt(Key, at)); !got.Equal(at) {
		t.Fatalf("Time = %v, want %v", got, at)
	}
}
