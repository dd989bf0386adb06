package lbb

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
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

// schema is what TestHandWrittenMatchDocument reads of a schema of the document.
type schema struct {
	Properties map[string]json.RawMessage `json:"properties"`
	Required   []string                   `json:"required"`
}

// TestHandWrittenMatchDocument checks the wire types the SDK writes by hand (its public
// parameter types, which are the bodies of its requests, and its Error) against the
// document: every field is a property of the schema, and every property the schema
// requires is a field.
func TestHandWrittenMatchDocument(t *testing.T) {
	b, err := os.ReadFile("../../internal/api/openapi.json")
	if err != nil {
		t.Skipf("the OpenAPI document is not here (the SDK outside its repository): %v", err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var apiError schema
	if err := json.Unmarshal(doc.Components.Schemas["Error"].Properties["error"], &apiError); err != nil {
		t.Fatalf("Error.error: %v", err)
	}
	doc.Components.Schemas["Error.error"] = apiError
	for _, tc := range []struct {
		schema string
		value  any
	}{
		{"CreateSandboxRequest", CreateParams{}},
		{"TemplateRequest", TemplateParams{}},
		{"KeyRequest", KeyParams{}},
		{"ExecRequest", execBody{}},
		{"SnapshotRequest", SnapshotRequest{}},
		{"ForkRequest", ForkRequest{}},
		{"Error.error", Error{}},
	} {
		s, ok := doc.Components.Schemas[tc.schema]
		if !ok {
			t.Errorf("%s: not in the document", tc.schema)
			continue
		}
		fields := jsonFields(reflect.TypeOf(tc.value))
		for _, f := range fields {
			if _, ok := s.Properties[f]; !ok {
				t.Errorf("%T has %q, which %s does not have", tc.value, f, tc.schema)
			}
		}
		for _, r := range s.Required {
			if !slices.Contains(fields, r) {
				t.Errorf("%T lacks %q, which %s requires", tc.value, r, tc.schema)
			}
		}
	}
}

// jsonFields lists the names encoding/json gives t's fields, embedded structs' included.
func jsonFields(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported() && !f.Anonymous:
		case f.Anonymous && name == "":
			names = append(names, jsonFields(f.Type)...)
		case name == "":
			names = append(names, f.Name)
		default:
			names = append(names, name)
		}
	}
	return names
}
