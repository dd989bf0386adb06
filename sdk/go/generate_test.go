package lbb

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestWireTypesCurrent runs generate.go's go:generate line into a temporary directory and
// fails when wire.gen.go is not what it makes: the OpenAPI document changed and the SDK was
// not regenerated (go generate, in sdk/go), or wire.gen.go was edited by hand.
func TestWireTypesCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: generating fetches oapi-codegen through the Go module proxy")
	}
	spec, err := filepath.Abs("../../internal/api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(spec); err != nil {
		t.Skipf("the OpenAPI document is not here (the SDK outside its repository): %v", err)
	}
	src, err := os.ReadFile("generate.go")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for line := range strings.SplitSeq(string(src), "\n") {
		if rest, ok := strings.CutPrefix(line, "//go:generate "); ok {
			args = strings.Fields(rest)
		}
	}
	if len(args) == 0 || args[len(args)-1] != "../../internal/api/openapi.json" {
		t.Fatalf("generate.go: no go:generate line ending in the document: %q", args)
	}
	args[len(args)-1] = spec

	dir := t.TempDir()
	for _, f := range []string{"oapi-codegen.yaml", "oapi-overlay.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	want, err := os.ReadFile(filepath.Join(dir, "wire.gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("wire.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("wire.gen.go is not what internal/api/openapi.json makes: run go generate in sdk/go")
	}
}
