package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
)

// lbbMain runs lbb with args and answers its exit status, what it printed to stdout (its own
// help and messages, and what commands print) and its own stderr.
func lbbMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cliOut, cliErr = &out, &errb
	// Commands print results and streamed output to os.Stdout and os.Stderr.
	stdout, stderr := os.Stdout, os.Stderr
	f, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout, os.Stderr = f, f
	defer func() {
		cliOut, cliErr = os.Stdout, os.Stderr
		os.Stdout, os.Stderr = stdout, stderr
		f.Close()
	}()
	code := runMain(args)
	b, _ := os.ReadFile(f.Name())
	return code, out.String() + string(b), errb.String()
}

func TestHelpExitsZeroForEveryCommandAndVerb(t *testing.T) {
	for name, c := range commands {
		for _, h := range []string{"--help", "-h"} {
			if code, _, errb := lbbMain(t, name, h); code != 0 {
				t.Errorf("lbb %s %s: exit %d, stderr %q", name, h, code, errb)
			}
		}
		for _, v := range c.verbs {
			code, out, errb := lbbMain(t, name, v.name, "--help")
			if code != 0 || errb != "" {
				t.Errorf("lbb %s %s --help: exit %d, stderr %q", name, v.name, code, errb)
			}
			if v.name != "bench" && !strings.HasPrefix(out, fmt.Sprintf("Usage: lbb %s %s", name, v.name)) {
				t.Errorf("lbb %s %s --help printed %q", name, v.name, out)
			}
			// lbb help NOUN VERB and lbb NOUN help VERB say the same.
			for _, args := range [][]string{{"help", name, v.name}, {name, "help", v.name}} {
				if code, out2, _ := lbbMain(t, args...); code != 0 || out2 != out {
					t.Errorf("lbb %s: exit %d, printed %q, want lbb %s %s --help's", strings.Join(args, " "), code, out2, name, v.name)
				}
			}
		}
	}
}

func TestHelpNamesEveryCommandAndVerb(t *testing.T) {
	code, out, _ := lbbMain(t, "help")
	if code != 0 {
		t.Fatalf("lbb help: exit %d", code)
	}
	for name, c := range commands {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("lbb help does not name %s:\n%s", name, out)
		}
		var verbs []string
		for _, v := range c.verbs {
			verbs = append(verbs, v.name)
		}
		if len(verbs) > 0 && !strings.Contains(out, strings.Join(verbs, "|")) {
			t.Errorf("lbb help does not list the verbs of %s (%s):\n%s", name, strings.Join(verbs, "|"), out)
		}
		_, nounHelp, _ := lbbMain(t, name, "--help")
		for _, v := range verbs {
			if !strings.Contains(nounHelp, "  lbb "+name+" "+v) {
				t.Errorf("lbb %s --help does not show lbb %s %s:\n%s", name, name, v, nounHelp)
			}
		}
	}
	for _, want := range []string{"get|list|logs|kill", "sandbox ", "audit "} {
		if !strings.Contains(out, want) {
			t.Errorf("lbb help lacks %q:\n%s", want, out)
		}
	}
}

// Every noun answers to its singular and its plural.
func TestNounsAnswerToSingularAndPlural(t *testing.T) {
	for name, c := range commands {
		if c.verbs == nil {
			continue
		}
		other := name + "s"
		if strings.HasSuffix(name, "s") {
			other = strings.TrimSuffix(name, "s")
		} else if strings.HasSuffix(name, "x") {
			other = name + "es"
		}
		if !slices.Contains(c.aliases, other) {
			t.Errorf("lbb %s has no alias %s", name, other)
		}
	}
	for _, args := range [][]string{
		{"sandboxes", "list", "--help"},
		{"sandbox", "ls", "--help"},
		{"template", "list", "--help"},
		{"templates", "ls", "--help"},
		{"command", "get", "--help"},
		{"key", "ls", "--help"},
		{"file", "ls", "--help"},
	} {
		if code, out, _ := lbbMain(t, args...); code != 0 || !strings.HasPrefix(out, "Usage: lbb ") {
			t.Errorf("lbb %s: exit %d, printed %q", strings.Join(args, " "), code, out)
		}
	}
}

func TestUnknownCommandSuggestsTheNearest(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sandboxs", "list"}, `lbb: unknown command "sandboxs"; did you mean lbb sandbox?`},
		{[]string{"snadbox"}, `lbb: unknown command "snadbox"; did you mean lbb sandbox?`},
		{[]string{"templtes", "list"}, `lbb: unknown command "templtes"; did you mean lbb templates?`},
		{[]string{"rnu"}, `lbb: unknown command "rnu"; did you mean lbb run?`},
		{[]string{"sand"}, `lbb: unknown command "sand"; did you mean lbb sandbox?`},
		{[]string{"exec"}, `lbb: unknown command "exec"; did you mean lbb sandbox exec?`},
		{[]string{"logs"}, `lbb: unknown command "logs"; did you mean lbb commands logs?`},
		{[]string{"xyzzy"}, `lbb: unknown command "xyzzy"; lbb help lists the commands`},
		{[]string{"list"}, `lbb: unknown command "list"; did you mean lbb {commands|files|keys|sandbox|templates} list?`},
		{[]string{"sandbox", "lst"}, `lbb sandbox: unknown verb "lst"; did you mean lbb sandbox list?`},
		{[]string{"templates", "craete"}, `lbb templates: unknown verb "craete"; did you mean lbb templates create?`},
		{[]string{"commands", "frobnicate"}, `lbb commands: unknown verb "frobnicate"; lbb commands --help lists them`},
	} {
		code, out, errb := lbbMain(t, tc.args...)
		if code != 2 || strings.TrimSpace(errb) != tc.want || out != "" {
			t.Errorf("lbb %s: exit %d, stdout %q, stderr %q; want exit 2 and %q alone", strings.Join(tc.args, " "), code, out, errb, tc.want)
		}
	}
}

func TestBadFlagIsOneLineAndExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		cmd  string
	}{
		{[]string{"run", "--nope"}, "lbb run"},
		{[]string{"sandbox", "exec", "--nope", "sbx", "--", "true"}, "lbb sandbox exec"},
		{[]string{"audit", "--nope"}, "lbb audit"},
	} {
		code, out, errb := lbbMain(t, tc.args...)
		want := fmt.Sprintf("%s: flag provided but not defined: -nope (%s --help lists the flags)\n", tc.cmd, tc.cmd)
		if code != 2 || errb != want || out != "" {
			t.Errorf("lbb %s: exit %d, stdout %q, stderr %q; want exit 2, %q", strings.Join(tc.args, " "), code, out, errb, want)
		}
	}
}

// fakeServer answers the calls lbb makes with canned answers, by "METHOD path".
func fakeServer(t *testing.T, routes map[string]http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := routes[r.Method+" "+r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": "not_found", "message": "no route " + r.URL.Path, "request_id": "req_1"}})
			return
		}
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestServerErrorHasOnePrefix(t *testing.T) {
	url := fakeServer(t, map[string]http.HandlerFunc{
		"POST /v1/sandboxes": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error": {"code": "not_found", "message": "template sum@9 not found", "request_id": "req_9"}}`)
		},
	})
	code, _, errb := lbbMain(t, "run", "--template", "sum@9", "--url", url, "--api-key", "k")
	want := "lbb run: template sum@9 not found (404 not_found, request req_9)\n"
	if code != 1 || errb != want {
		t.Errorf("exit %d, stderr %q; want 1 and %q", code, errb, want)
	}
}

// execServer answers one exec, started with its output streamed (as lbb sandbox exec asks):
// the record, events, then the exit record.
func execServer(t *testing.T, events []string, exit string) string {
	return fakeServer(t, map[string]http.HandlerFunc{
		"POST /v1/sandboxes/sbx_1/commands": func(w http.ResponseWriter, r *http.Request) {
			var body struct{ Stream bool }
			if json.NewDecoder(r.Body).Decode(&body); !body.Stream || r.Header.Get("Accept") != "text/event-stream" {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"error": {"code": "invalid_request", "message": "lbb sandbox exec did not ask for a stream", "request_id": "req_1"}}`)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: command\ndata: {\"id\": \"cmd_1\", \"sandbox\": \"sbx_1\", \"kind\": \"process\", \"status\": \"running\", \"exit_code\": null}\n\n")
			for _, e := range events {
				fmt.Fprint(w, e)
			}
			fmt.Fprintf(w, "event: exit\ndata: %s\n\n", exit)
		},
	})
}

func chunk(stream string, offset int, data string) string {
	b, _ := json.Marshal(map[string]any{"stream": stream, "offset": offset, "data": data})
	return fmt.Sprintf("event: %s\ndata: %s\n\n", stream, b)
}

func TestExecSaysWhatHappened(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []string
		exit   string
		code   int
		stdout string
		stderr string
	}{
		{"succeeded", []string{chunk("stdout", 0, "hi\n")},
			`{"id": "cmd_1", "status": "succeeded", "exit_code": 0, "stdout": {"bytes": 3}}`, 0, "hi\n", ""},
		{"its own exit code, silently", []string{chunk("stdout", 0, "hi\n")},
			`{"id": "cmd_1", "status": "failed", "exit_code": 7, "stdout": {"bytes": 3}}`, 7, "hi\n", ""},
		{"timed out", nil,
			`{"id": "cmd_1", "status": "timed_out", "exit_code": 137, "signal": "SIGKILL", "timeout_ms": 1000, "error": "the command passed its timeout of 1s"}`,
			124, "", "lbb sandbox exec: command cmd_1 timed out after 1000 ms\n"},
		{"out of memory", nil,
			`{"id": "cmd_1", "status": "oom", "exit_code": 137, "error": "the command ran out of memory (limit 64 MiB)"}`,
			137, "", "lbb sandbox exec: command cmd_1: oom: the command ran out of memory (limit 64 MiB)\n"},
		{"a gap in the stream", []string{chunk("stdout", 0, "a\n"), chunk("stdout", 10, "b\n")},
			`{"id": "cmd_1", "status": "succeeded", "exit_code": 0, "stdout": {"bytes": 12}}`,
			125, "a\n\n[lbb: 8 bytes of stdout were not kept]\nb\n",
			"lbb sandbox exec: 8 bytes of the output of cmd_1 were not kept: what was printed is incomplete\n"},
		{"bytes missing at the end", []string{chunk("stdout", 0, "a\n")},
			`{"id": "cmd_1", "status": "failed", "exit_code": 3, "stdout": {"bytes": 5}}`,
			125, "a\n\n[lbb: 3 bytes of stdout were not kept]\n",
			"lbb sandbox exec: 3 bytes of the output of cmd_1 were not kept: what was printed is incomplete\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := execServer(t, tc.events, tc.exit)
			code, out, errb := lbbMain(t, "sandbox", "exec", "--url", url, "--api-key", "k", "sbx_1", "--", "true")
			if code != tc.code || out != tc.stdout || errb != tc.stderr {
				t.Errorf("exit %d, output %q, stderr %q; want %d, %q, %q", code, out, errb, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

func TestSandboxListAsksForLiveStatusesByDefault(t *testing.T) {
	var asked []string
	url := fakeServer(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes": func(w http.ResponseWriter, r *http.Request) {
			st := r.URL.Query().Get("status")
			asked = append(asked, st)
			switch st {
			case "running":
				io.WriteString(w, `{"data": [{"id": "sbx_run", "status": "running", "created_at": "2026-01-01T00:00:02Z"}]}`)
			case "stopped":
				io.WriteString(w, `{"data": [{"id": "sbx_stop", "status": "stopped", "created_at": "2026-01-01T00:00:03Z"}]}`)
			case "":
				io.WriteString(w, `{"data": [{"id": "sbx_gone", "status": "destroyed", "one_call": true, "created_at": "2026-01-01T00:00:04Z"}]}`)
			default:
				io.WriteString(w, `{"data": []}`)
			}
		},
	})
	code, out, errb := lbbMain(t, "sandbox", "list", "--url", url, "--api-key", "k")
	if code != 0 || errb != "" {
		t.Fatalf("exit %d, stderr %q", code, errb)
	}
	if !slices.Equal(asked, liveStatuses) {
		t.Errorf("asked for statuses %q, want %q", asked, liveStatuses)
	}
	// Newest first, the ended one-call sandbox absent.
	if i, j := strings.Index(out, "sbx_stop"), strings.Index(out, "sbx_run"); i < 0 || j < i || strings.Contains(out, "sbx_gone") {
		t.Errorf("lbb sandbox list printed\n%s", out)
	}
	asked = nil
	if code, out, _ := lbbMain(t, "sandbox", "list", "--all", "--url", url, "--api-key", "k"); code != 0 || !strings.Contains(out, "sbx_gone") || !slices.Equal(asked, []string{""}) {
		t.Errorf("--all: exit %d, asked %q, printed\n%s", code, asked, out)
	}
	asked = nil
	if code, _, _ := lbbMain(t, "sandbox", "list", "--status", "paused,destroyed", "--url", url, "--api-key", "k"); code != 0 || !slices.Equal(asked, []string{"paused", "destroyed"}) {
		t.Errorf("--status paused,destroyed: exit %d, asked %q", code, asked)
	}
}

func TestDidYouMean(t *testing.T) {
	cands := []string{"create", "list", "ls", "get", "exec", "delete", "rm"}
	for word, want := range map[string]string{"lst": "list", "craete": "create", "exce": "exec", "del": "delete", "zzzzzz": "", "": ""} {
		if got := didYouMean(word, cands); got != want {
			t.Errorf("didYouMean(%q) = %q, want %q", word, got, want)
		}
	}
}
