package sdkgo_test

import (
	"context"
	"strings"
	"testing"

	"github.com/littlebigbrain/lbb/internal/blobs"
	"github.com/littlebigbrain/lbb/internal/testkit"
	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

func TestLevel3(t *testing.T) {
	c := newLevel3Client(t)
	ctx := context.Background()
	var id string
	err := c.Sandboxes.Scoped(ctx, lbb.CreateParams{ExpiresInSeconds: 60, Env: map[string]string{"TOKEN": "very-secret"},
		Metadata: map[string]string{"team": "sdk"}}, func(sb *lbb.Sandbox) error {
		id = sb.ID
		if sb.Status != "running" || sb.ExpiresAt == nil || sb.Metadata["team"] != "sdk" {
			t.Fatalf("created: %+v", sb)
		}
		e, err := c.Files.Write(ctx, sb.ID, "dir/data.csv", strings.NewReader("1,2\n3,4\n"))
		if err != nil || e.Size != 8 || e.Path != "dir/data.csv" || e.MTime.IsZero() {
			t.Fatalf("write: %+v %v", e, err)
		}
		es, err := c.Files.List(ctx, sb.ID, "", true)
		if err != nil || len(es) != 2 {
			t.Fatalf("list: %+v %v", es, err)
		}
		if b := testkit.Content(t)(c.Files.Read(ctx, sb.ID, "dir/data.csv")); b != "1,2\n3,4\n" {
			t.Fatalf("read: %q", b)
		}
		if _, err := c.Files.Read(ctx, sb.ID, "../x"); lbb.CodeOf(err) != "path_outside_workspace" {
			t.Fatalf("escape: %v", err)
		}
		cmd, err := c.Sandboxes.Exec(ctx, sb.ID, lbb.ExecParams{Argv: []string{"sh", "-c", "wc -l < dir/data.csv; echo $TOKEN"}})
		if err != nil || cmd.Status != "succeeded" || cmd.Stdout.Tail != "2\n***\n" {
			t.Fatalf("exec: %+v %v", cmd, err)
		}
		run, err := c.Sandboxes.RunIn(ctx, sb.ID, lbb.RunParams{Code: "def run(input, config):\n    return len(open(input).read())", Input: "dir/data.csv"})
		if err != nil || !run.OK || string(run.Result) != "8" {
			t.Fatalf("run in: %+v %v", run, err)
		}
		bgc, err := c.Sandboxes.Exec(ctx, sb.ID, lbb.ExecParams{Argv: []string{"sh", "-c", "read a; echo got $a; sleep 0.2; echo done >&2"}, StdinOpen: true, WaitMs: -1})
		if err != nil || bgc.Status != "running" {
			t.Fatalf("background: %+v %v", bgc, err)
		}
		out, err := c.Commands.Output(ctx, bgc.ID, "", true)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Commands.WriteStdin(ctx, bgc.ID, []byte("hello\n"), true); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for out.Next() {
			got[out.Chunk().Stream] += string(out.Chunk().Data)
		}
		if out.Err() != nil || got["stdout"] != "got hello\n" || got["stderr"] != "done\n" || out.Exit() == nil || out.Exit().Status != "succeeded" {
			t.Fatalf("output: %v %q %+v", out.Err(), got, out.Exit())
		}
		sleeper, _ := c.Sandboxes.Exec(ctx, sb.ID, lbb.ExecParams{Argv: []string{"sleep", "30"}, WaitMs: -1})
		if k, err := c.Commands.Kill(ctx, sleeper.ID, "KILL"); err != nil || k.Status != "killed" {
			t.Fatalf("kill: %+v %v", k, err)
		}
		f, err := c.GraphFiles.Keep(ctx, sb.ID, "dir/data.csv")
		if err != nil || f.SHA256 != blobs.Digest([]byte("1,2\n3,4\n")) || f.Origin.Sandbox != sb.ID {
			t.Fatalf("keep: %+v %v", f, err)
		}
		imp, err := c.GraphFiles.Import(ctx, sb.ID, "copy.csv", f.SHA256)
		if err != nil || imp.SHA256 != f.SHA256 || imp.Size != 8 {
			t.Fatalf("import: %+v %v", imp, err)
		}
		up, err := c.GraphFiles.Upload(ctx, "u.txt", strings.NewReader("u"))
		if err != nil || up.Name != "u.txt" {
			t.Fatalf("upload: %+v %v", up, err)
		}
		if b := testkit.Content(t)(c.GraphFiles.Content(ctx, up.ID)); b != "u" {
			t.Fatalf("content: %q", b)
		}
		if l, err := c.GraphFiles.List(ctx, lbb.ListParams{}); err != nil || len(l.Data) != 2 {
			t.Fatalf("files: %+v %v", l, err)
		}
		if st, err := c.Sandboxes.Stop(ctx, sb.ID); err != nil || st.Status != "stopped" {
			t.Fatalf("stop: %+v %v", st, err)
		}
		if st, err := c.Sandboxes.Resume(ctx, sb.ID); err != nil || st.Status != "running" {
			t.Fatalf("resume: %+v %v", st, err)
		}
		if err := c.Files.Delete(ctx, sb.ID, "dir"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Files.Mkdir(ctx, sb.ID, "a/b"); err != nil {
			t.Fatal(err)
		}
		if l, err := c.Sandboxes.List(ctx, lbb.ListParams{Labels: map[string]string{"team": "sdk"}, Status: "running"}); err != nil || len(l.Data) != 1 {
			t.Fatalf("list by label: %+v %v", l, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sb, err := c.Sandboxes.Get(ctx, id); err != nil || sb.Status != "destroyed" {
		t.Fatalf("after Scoped: %+v %v", sb, err)
	}
}
