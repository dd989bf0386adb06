package step

import "testing"

// The key is stable across attempts and the same as the TypeScript SDK's stepKey.
func TestKey(t *testing.T) {
	k := Step{Workflow: "wf-1", ID: "append", Attempt: 3}.Key()
	if k != "step-78ccbc250ccb4472b263d51336c07f99" {
		t.Fatalf("key %s", k)
	}
	if k2 := (Step{Workflow: "wf-1", Run: "wf-1", ID: "append", Attempt: 4}).Key(); k2 != k {
		t.Fatalf("another attempt's key %s, want %s", k2, k)
	}
	if (Step{Workflow: "wf-1", ID: "other"}).Key() == k {
		t.Fatal("another step has the same key")
	}
}
