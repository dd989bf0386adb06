package hostagent

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestMaskWriter(t *testing.T) {
	secrets := Secrets(map[string]string{"TOKEN": "s3cr3t-value", "SHORT": "ab", "OTHER": "hunter2"})
	if len(secrets) != 2 {
		t.Fatalf("Secrets = %q", secrets)
	}
	in := "start s3cr3t-value middle hunter2 and s3cr3t-value end ab"
	for _, chunk := range []int{1, 2, 3, 5, 7, 100} {
		var out bytes.Buffer
		w := newMaskWriter(&out, secrets)
		for i := 0; i < len(in); i += chunk {
			w.Write([]byte(in[i:min(len(in), i+chunk)]))
		}
		flush(w)
		want := "start *** middle *** and *** end ab"
		if out.String() != want {
			t.Errorf("chunk %d: %q, want %q", chunk, out.String(), want)
		}
	}
}

func TestMaskJSON(t *testing.T) {
	secrets := []string{"s3cr3t"}
	got := MaskJSON(json.RawMessage(`{"k":"x s3cr3t y","n":12345678901234567890,"a":["s3cr3t"],"s3cr3t":1}`), secrets)
	if strings.Contains(string(got), "s3cr3t") || !strings.Contains(string(got), "12345678901234567890") {
		t.Fatalf("MaskJSON = %s", got)
	}
}
