package sdkgo_test

import (
	"context"
	"testing"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// TestIsolation: the Isolation fields reach the server and come back in runs, sandboxes and
// templates; a name the server does not have is invalid_request. (The server here offers its
// configured runtime, ns, alone; test/e2e runs ns and gvisor side by side.)
func TestIsolation(t *testing.T) {
	c, _ := newClient(t, nil)
	ctx := context.Background()
	tpl, err := c.Sandboxes.Templates.Create(ctx, lbb.TemplateParams{Name: "iso", Code: "x", Isolation: "ns"})
	if err != nil || tpl.Isolation != "ns" {
		t.Fatalf("template: %+v %v", tpl, err)
	}
	got, err := c.Sandboxes.Templates.Get(ctx, "iso")
	if err != nil || got.Isolation != "ns" || len(got.Versions) != 1 || got.Versions[0].Isolation != "ns" {
		t.Fatalf("template get: %+v %v", got, err)
	}
	run, err := c.Sandboxes.Run(ctx, lbb.RunParams{Code: "x", Input: 1, Isolation: "ns"})
	if err != nil || run.Isolation != "ns" {
		t.Fatalf("run: %+v %v", run, err)
	}
	sb, err := c.Sandboxes.Get(ctx, run.Sandbox)
	if err != nil || sb.Isolation != "ns" {
		t.Fatalf("the run's sandbox: %+v %v", sb, err)
	}
	if _, err := c.Sandboxes.Run(ctx, lbb.RunParams{Code: "x", Isolation: "microvm"}); lbb.CodeOf(err) != "invalid_request" {
		t.Errorf("run on microvm: %v", err)
	}
	if _, err := c.Sandboxes.Templates.Create(ctx, lbb.TemplateParams{Name: "iso", Isolation: "microvm"}); lbb.CodeOf(err) != "invalid_request" {
		t.Errorf("template on microvm: %v", err)
	}

	l3 := newLevel3Client(t)
	created, err := l3.Sandboxes.Create(ctx, lbb.CreateParams{Isolation: "ns"})
	if err != nil || created.Isolation != "ns" {
		t.Fatalf("create: %+v %v", created, err)
	}
	l3.Sandboxes.Delete(ctx, created.ID)
	if _, err := l3.Sandboxes.Create(ctx, lbb.CreateParams{Isolation: "microvm"}); lbb.CodeOf(err) != "invalid_request" {
		t.Errorf("create on microvm: %v", err)
	}
}
