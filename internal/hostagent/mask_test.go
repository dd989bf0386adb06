package hostagent

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
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

// encodings are the ways a program may print a secret that masking catches, each written with
// the standard library, independently of the masker.
var encodings = []struct {
	name string
	enc  func(string) string
}{
	{"literal", func(s string) string { return s }},
	{"hex", func(s string) string { return hex.EncodeToString([]byte(s)) }},
	{"HEX", func(s string) string { return strings.ToUpper(hex.EncodeToString([]byte(s))) }},
	{"base64", func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }},
	{"base64 raw", func(s string) string { return base64.RawStdEncoding.EncodeToString([]byte(s)) }},
	{"base64 url", func(s string) string { return base64.URLEncoding.EncodeToString([]byte(s)) }},
	{"base64 url raw", func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }},
	{"query", url.QueryEscape},
	{"path", url.PathEscape},
	{"query of base64", func(s string) string { return url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(s))) }},
}

// base64Inner is the part of v's base64 that v alone decides when v starts at byte offset
// align (mod 3) of the encoded data.
func base64Inner(enc *base64.Encoding, v string, align int) string {
	s := enc.EncodeToString(append(make([]byte, align), v...))
	lo, hi := (8*align+5)/6, 8*(align+len(v))/6
	if hi <= lo {
		return ""
	}
	return s[lo:hi]
}

// leaks lists the forms of secret v that appear in out.
func leaks(out, v string) []string {
	var found []string
	for _, e := range encodings {
		if f := e.enc(v); strings.Contains(out, f) {
			found = append(found, e.name+" "+f)
		}
	}
	for align := range 3 {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			if f := base64Inner(enc, v, align); len(f) >= MinSecret && strings.Contains(out, f) {
				found = append(found, fmt.Sprintf("base64 at %d %s", align, f))
			}
		}
	}
	return found
}

// maskChunked writes in to a maskWriter cut every n bytes, checking that it never holds back
// more than its longest form.
func maskChunked(t testing.TB, in string, secrets []string, n int) string {
	var out bytes.Buffer
	w := newMaskWriter(&out, secrets).(*maskWriter)
	for i := 0; i < len(in); i += n {
		w.Write([]byte(in[i:min(len(in), i+n)]))
		if len(w.buf) > w.m.hold {
			t.Fatalf("holds back %d bytes, more than %d", len(w.buf), w.m.hold)
		}
	}
	w.Flush()
	return out.String()
}

func TestMaskForms(t *testing.T) {
	const secret = "s3cr3t/Value+1 x?"
	secrets := Secrets(map[string]string{"TOKEN": secret})
	for _, e := range encodings {
		for _, around := range []string{"%s", "a %s b", "ab%s\n", "abc%s.", "x=%s&y=1", "%s%s"} {
			in := strings.ReplaceAll(around, "%s", e.enc(secret))
			want := strings.ReplaceAll(around, "%s", Mask)
			if got := MaskString(in, secrets); got != want {
				t.Errorf("%s in %q: %q, want %q", e.name, in, got, want)
			}
		}
	}
	// Inside longer base64, a secret's first and last few bits stay visible: the characters
	// they share with what surrounds it.
	for _, prefix := range []string{"", "u", "us", "user:"} {
		for _, suffix := range []string{"", "!", "?!", "and more"} {
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
				in := enc.EncodeToString([]byte(prefix + secret + suffix))
				got := MaskString("Authorization: Basic "+in, secrets)
				if l := leaks(got, secret); len(l) > 0 || !strings.Contains(got, Mask) {
					t.Errorf("base64 of %q: %q, leaks %q", prefix+secret+suffix, got, l)
				}
				if len(got) > len(in)+len("Authorization: Basic ")-len(Mask) {
					t.Errorf("base64 of %q: %q keeps more than the ends", prefix+secret+suffix, got)
				}
			}
		}
	}
	for _, tc := range []struct{ name, in string }{
		// Not caught (README.md): other transformations of the value.
		{"reversed", "x?1+eulaV/t3rc3s"},
		{"split", "s3cr3t/Val ue+1 x?"},
		{"mixed case", "S3CR3T/VALUE+1 X?"},
		{"hex with spaces", "73 33 63 72 33 74 2f 56 61 6c 75 65 2b 31 20 78 3f"},
		{"json escape", `s3cr3t\/Value+1 x?`},
		// Ordinary output around a secret stays as it is.
		{"text", "the build took 12.3s; 0 errors, 2 warnings: see https://example.test/a?b=c%20d"},
	} {
		if got := MaskString(tc.in, secrets); got != tc.in {
			t.Errorf("%s: %q masked to %q", tc.name, tc.in, got)
		}
	}
}

// TestMaskWriterSplits checks that a stream masks the same however it is cut.
func TestMaskWriterSplits(t *testing.T) {
	secrets := Secrets(map[string]string{"A": "s3cr3t-value", "B": "hunter2", "C": "hunter2 and more"})
	var in strings.Builder
	for _, v := range []string{"s3cr3t-value", "hunter2", "hunter2 and more"} {
		for _, e := range encodings {
			fmt.Fprintf(&in, "%s: <%s>\n", e.name, e.enc(v))
		}
	}
	whole := MaskString(in.String(), secrets)
	for _, v := range []string{"s3cr3t-value", "hunter2", "hunter2 and more"} {
		if l := leaks(whole, v); len(l) > 0 {
			t.Errorf("leaks %q in\n%s", l, whole)
		}
	}
	for n := 1; n <= 40; n++ {
		if got := maskChunked(t, in.String(), secrets, n); got != whole {
			t.Fatalf("cut every %d bytes:\n%s\nwant\n%s", n, got, whole)
		}
	}
}

// FuzzMask checks, for any secret and any output around one of its forms, that no whole
// form gets through, that the output never grows, that a writer holds back at most its
// longest form, and that the cuts between writes do not matter.
func FuzzMask(f *testing.F) {
	f.Add("s3cr3t-value", []byte("before "), []byte(" after"), uint8(0), uint16(3))
	f.Add("hunter2 +/=%", []byte("Authorization: Basic "), []byte("\n"), uint8(3), uint16(1))
	f.Add("aaaa", []byte("aaa"), []byte("aaaa"), uint8(7), uint16(2))
	f.Add("%25%", []byte("%"), []byte("25"), uint8(8), uint16(5))
	f.Add("000\xb6", []byte("0"), []byte("0"), uint8(0), uint16(1)) // a byte >= 0x80 is no rune
	f.Fuzz(func(t *testing.T, secret string, prefix, suffix []byte, kind uint8, cut uint16) {
		if len(secret) < MinSecret || len(secret) > 256 || strings.Contains(secret, Mask[:1]) {
			t.Skip() // a secret containing the mask could be rebuilt from masks around it
		}
		secrets := Secrets(map[string]string{"S": secret})
		e := encodings[int(kind)%len(encodings)]
		in := string(prefix) + e.enc(secret) + string(suffix)
		whole := MaskString(in, secrets)
		if l := leaks(whole, secret); len(l) > 0 {
			t.Fatalf("%q masked to %q leaks %q", in, whole, l)
		}
		if len(whole) > len(in) {
			t.Fatalf("%q masked to %q, longer", in, whole)
		}
		if got := maskChunked(t, in, secrets, 1+int(cut)%64); got != whole {
			t.Fatalf("cut every %d: %q, whole %q", 1+int(cut)%64, got, whole)
		}
	})
}

func BenchmarkMaskWriter(b *testing.B) {
	secrets := Secrets(map[string]string{"A": "s3cr3t-value-0123456789", "B": "hunter2", "C": "another one"})
	line := []byte("2024-01-01T00:00:00Z step 12345 of 67890: loss=0.0123 acc=99.5% ok\n")
	b.SetBytes(int64(len(line)))
	w := newMaskWriter(io.Discard, secrets)
	for b.Loop() {
		w.Write(line)
	}
}
