package codeint

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
	"time"
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

// TestShellDriver runs the shell driver on this host (python3 and bash): cwd and an export
// kept, a non-zero exit, a timeout interrupted with the shell's state kept.
func TestShellDriver(t *testing.T) {
	argv, _ := Argv("bash")
	if _, err := exec.LookPath(argv[0]); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	read := func() []Event {
		var l Lines
		var evs []Event
		for sc.Scan() {
			evs = append(evs, l.Feed(append(sc.Bytes(), '\n'))...)
			if e := evs[len(evs)-1]; e.Type == EventEnd || e.Type == EventReady {
				return evs
			}
		}
		t.Fatal("the driver ended")
		return nil
	}
	run := func(code string, ms int64) (string, string, string) {
		in.Write(Request{ID: "c", Code: code, TimeoutMs: ms}.Line())
		var stdout, name string
		evs := read()
		for _, ev := range evs {
			switch ev.Type {
			case EventStdout:
				stdout += ev.Text
			case EventError:
				name = ev.Name
			}
		}
		return stdout, name, evs[len(evs)-1].Status
	}
	read()
	run("cd / && export A=5", 0)
	if o, _, st := run("echo $A $(pwd)", 0); o != "5 /\n" || st != "ok" {
		t.Fatalf("state: %q %s", o, st)
	}
	if _, name, st := run("false", 0); name != "ExitStatus" || st != "error" {
		t.Fatalf("exit: %s %s", name, st)
	}
	t0 := time.Now()
	if o, name, st := run("echo a; sleep 30", 300); o != "a\n" || name != "TimeoutError" || st != "timeout" || time.Since(t0) > 5*time.Second {
		t.Fatalf("timeout: %q %s %s", o, name, st)
	}
	if o, _, _ := run("echo $A", 0); o != "5\n" {
		t.Fatalf("after the timeout: %q", o)
	}
}
