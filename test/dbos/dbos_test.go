// Package dbos_test runs lbb as the step of a durable workflow engine, DBOS (a module of
// its own, so that neither lbb nor its Go SDK depends on the engine): a worker process runs
// a DBOS workflow whose step runs a command in a sandbox through sdk/go/step; the worker is
// killed with SIGKILL, a new worker recovers the workflow, and the step answers the same
// command record, which ran once. DBOS keeps its state in PostgreSQL (a throwaway cluster the
// test starts, internal/store/postgres/pgtest) and, as well, in its embedded SQLite.
package dbos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite"

	"github.com/littlebigbrain/lbb/internal/images"
	"github.com/littlebigbrain/lbb/internal/store/postgres/pgtest"
	"github.com/littlebigbrain/lbb/internal/testkit"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
	"github.com/littlebigbrain/lbb/sdk/go/step"
)

// The worker: the test binary run again with LBB_DBOS_WORKER=1.
func TestMain(m *testing.M) {
	if os.Getenv("LBB_DBOS_WORKER") == "1" {
		if err := worker(); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Appended is the answer of the workflow: the step's command record.
type Appended struct {
	Command string `json:"command"`
	Stdout  string `json:"stdout"`
	Attempt string `json:"attempt"`
}

// appendLine is the step's command: it appends a line to a file of the sandbox's workspace
// (reachable only through lbb), takes a while, and prints how many lines the file has.
func appendLine(file string) []string {
	return []string{"sh", "-c", "echo ran >> " + file + "; sleep 3; wc -l < " + file}
}

func worker() error {
	ctx := context.Background()
	env := os.Getenv
	client, err := lbb.New(lbb.Options{BaseURL: env("LBB_URL"), APIKey: env("LBB_API_KEY")})
	if err != nil {
		return err
	}
	gen, _ := strconv.Atoi(env("WORKER_GEN"))
	d, err := dbos.NewContext(ctx, dbos.Config{AppName: "lbb-step-test", DatabaseURL: env("DBOS_DATABASE_URL"),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	wf := func(c dbos.Context, file string) (Appended, error) {
		return dbos.RunAsStep(c, func(sctx context.Context) (Appended, error) {
			id, err := dbos.GetWorkflowID(c)
			if err != nil {
				return Appended{}, err
			}
			cmd, err := step.Exec(sctx, client, step.Step{Workflow: id, ID: "append", Attempt: gen},
				env("SANDBOX"), lbb.ExecParams{Argv: appendLine(file)})
			if err != nil {
				return Appended{}, err
			}
			if env("KILL_AFTER_ANSWER") == "1" {
				// lbb answered; the engine has not checkpointed the step yet.
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			return Appended{Command: cmd.ID, Stdout: cmd.Stdout.Tail, Attempt: cmd.Origin.Attempt}, nil
		}, dbos.WithStepName("append"))
	}
	dbos.RegisterWorkflow(d, wf)
	if err := dbos.Launch(d); err != nil { // recovers the workflows this executor left pending
		return err
	}
	defer dbos.Shutdown(d, 5*time.Second)
	var h dbos.WorkflowHandle[Appended]
	if env("START") == "1" {
		h, err = dbos.RunWorkflow(d, wf, env("FILE"), dbos.WithWorkflowID(env("WORKFLOW_ID")))
	} else {
		h, err = dbos.RetrieveWorkflow[Appended](d, env("WORKFLOW_ID"))
	}
	if err != nil {
		return err
	}
	out, err := h.GetResult()
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

var servingLine = regexp.MustCompile(`lbb: serving on (http://\S+)`)

// serve starts a real `lbb serve` on the ns driver and answers its URL and admin key.
func serve(t *testing.T) (string, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testkit.SkipPrivileged(t, "lbb serve on the ns driver needs root")
	}
	imagesDir := images.DefaultDir("")
	if _, err := images.Current(imagesDir); err != nil {
		testkit.SkipPrivileged(t, "no base image in %s: run `make images` (%v)", imagesDir, err)
	}
	bin := os.Getenv("LBB_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "lbb")
		for _, pkg := range []string{"cmd/lbb", "cmd/lbb-agent"} {
			b := exec.Command("go", "build", "-o", filepath.Join(filepath.Dir(bin), filepath.Base(pkg)), "./"+pkg)
			b.Dir, b.Env = "../..", append(os.Environ(), "CGO_ENABLED=0")
			if out, err := b.CombinedOutput(); err != nil {
				t.Fatalf("building %s: %v\n%s", pkg, err, out)
			}
		}
	}
	dir, err := os.MkdirTemp("", "lbb-dbos-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o711)
	t.Cleanup(func() { os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", data, "--images-dir", imagesDir, "--pool-min", "0")
	stderr, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if testing.Verbose() {
				fmt.Fprintln(os.Stderr, sc.Text())
			}
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		io.Copy(io.Discard, stderr)
		close(urls)
	}()
	select {
	case u, ok := <-urls:
		if !ok {
			t.Fatal("lbb serve exited before it served (go test -v shows its output)")
		}
		key, err := os.ReadFile(filepath.Join(data, "admin.key"))
		if err != nil {
			t.Fatal(err)
		}
		return u, strings.TrimSpace(string(key))
	case <-time.After(2 * time.Minute):
		t.Fatal("lbb serve did not start")
	}
	return "", ""
}

// TestStepRunsOnceAcrossACrash: the worker is killed (SIGKILL) while the step's command runs,
// and, in a second workflow, after lbb answered but before DBOS checkpointed the step; a new
// worker recovers each workflow, and its step answers the first attempt's command record:
// the command ran once.
func TestStepRunsOnceAcrossACrash(t *testing.T) {
	url, key := serve(t)
	ctx := context.Background()
	client, err := lbb.New(lbb.Options{BaseURL: url, APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := client.Sandboxes.Create(ctx, lbb.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Sandboxes.Delete(ctx, sb.ID)
	dir := t.TempDir()
	pg := pgtest.Start(t)
	if pg == nil {
		return
	}
	// DBOS's system database: PostgreSQL (what DBOS is built on), and its embedded SQLite.
	systems := map[string]func(kill string) string{
		"postgres": func(string) string { return pgtest.URL(pg.DSN()) },
		"sqlite":   func(kill string) string { return "sqlite:" + filepath.Join(dir, kill+".db") },
	}
	for _, system := range []string{"postgres", "sqlite"} {
		for _, kill := range []string{"mid-step", "after-answer"} {
			t.Run(system+"/"+kill, func(t *testing.T) {
				stepRunsOnce(t, client, sb.ID, url, key, "wf-"+system+"-"+kill, system+"-"+kill+".txt", kill, systems[system](kill))
			})
		}
	}
}

// stepRunsOnce runs workflow wfID in a worker killed as kill says, recovers it in a second
// worker, and checks the step's command ran once, with DBOS's system database at dbURL.
func stepRunsOnce(t *testing.T, client *lbb.Client, sandbox, url, key, wfID, file, kill, dbURL string) {
	ctx := context.Background()
	env := append(os.Environ(), "LBB_DBOS_WORKER=1", "LBB_URL="+url, "LBB_API_KEY="+key, "SANDBOX="+sandbox,
		"DBOS_DATABASE_URL="+dbURL, "WORKFLOW_ID="+wfID, "FILE="+file)
	start := func(gen int, extra ...string) (*exec.Cmd, *strings.Builder) {
		c := exec.Command(os.Args[0], "-test.run=^$")
		var out strings.Builder
		c.Env, c.Stdout, c.Stderr = append(append(env, "WORKER_GEN="+strconv.Itoa(gen)), extra...), &out, os.Stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c, &out
	}
	stepKey := step.Step{Workflow: wfID, ID: "append"}.Key()
	first, _ := start(1, "START=1", map[string]string{"mid-step": "", "after-answer": "KILL_AFTER_ANSWER=1"}[kill])
	var cmdID string
	if kill == "mid-step" {
		// Kill the worker once its step's command runs.
		deadline := time.Now().Add(time.Minute)
		for cmdID == "" && time.Now().Before(deadline) {
			l, err := client.Sandboxes.Commands(ctx, sandbox, lbb.ListParams{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range l.Data {
				if c.IdempotencyKey == stepKey && c.Status == "running" {
					cmdID = c.ID
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		if cmdID == "" {
			first.Process.Kill()
			t.Fatal("the step's command never ran")
		}
		first.Process.Kill()
	}
	err := first.Wait()
	if ws, ok := first.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the first worker was not killed: %v", err)
	}

	second, out := start(2)
	if err := second.Wait(); err != nil {
		t.Fatalf("the recovering worker: %v", err)
	}
	var got Appended
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("the recovering worker's answer %q: %v", out.String(), err)
	}
	l, err := client.Sandboxes.Commands(ctx, sandbox, lbb.ListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	for _, c := range l.Data {
		if c.IdempotencyKey == stepKey {
			ran = append(ran, c.ID)
		}
	}
	if len(ran) != 1 || cmdID != "" && got.Command != cmdID || got.Command != ran[0] {
		t.Fatalf("the step's commands %v, the recovered step answered %s (the first attempt's: %q)", ran, got.Command, cmdID)
	}
	// The code ran once: the file has one line, and so the record's output says.
	rc, err := client.Files.Read(ctx, sandbox, file)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "ran\n" || strings.TrimSpace(got.Stdout) != "1" {
		t.Fatalf("the step ran more than once: the file holds %q, the record's stdout %q", b, got.Stdout)
	}
	// The record is the first attempt's: its grant's origin says attempt 1.
	if got.Attempt != "1" {
		t.Errorf("the record's attempt %q, want 1 (the first attempt's record)", got.Attempt)
	}
	t.Logf("%s: worker 2 recovered %s and answered command %s, which ran once", kill, wfID, got.Command)
}
