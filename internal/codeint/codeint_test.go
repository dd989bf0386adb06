package codeint

import (
	"strings"
	"testing"
)

func TestLines(t *testing.T) {
	var l Lines
	if evs := l.Feed([]byte(`{"type":"ready"}` + "\n" + `{"id":"c","type":"std`)); len(evs) != 1 || evs[0].Type != EventReady {
		t.Fatalf("%+v", evs)
	}
	evs := l.Feed([]byte(`out","text":"hi\n"}` + "\nnot json\n" + `{"id":"c","type":"end","status":"ok","execution_count":3}` + "\n"))
	if len(evs) != 2 || evs[0].Text != "hi\n" || evs[1].Type != EventEnd || *evs[1].ExecutionCount != 3 {
		t.Fatalf("%+v", evs)
	}
}

func FuzzLines(f *testing.F) {
	f.Add([]byte(`{"type":"ready"}`+"\n"), 3)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		var whole, split Lines
		cut = max(0, min(cut, len(b)))
		want := whole.Feed(b)
		got := append(split.Feed(b[:cut]), split.Feed(b[cut:])...)
		if len(got) != len(want) {
			t.Fatalf("split at %d: %d events, whole %d", cut, len(got), len(want))
		}
	})
}

func TestArgv(t *testing.T) {
	for _, lang := range Languages {
		if argv, err := Argv(lang); err != nil || len(argv) < 3 || !strings.Contains(argv[len(argv)-1], "ready") {
			t.Errorf("%s: %v %v", lang, argv, err)
		}
	}
	if _, err := Argv("cobol"); err == nil {
		t.Error("cobol has a driver")
	}
}
