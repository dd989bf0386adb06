package host

import (
	"bytes"
	"encoding/json"
	"io"
	"sort"
)

// Mask is what replaces a secret value in output, results and errors.
const Mask = "***"

// MinSecret is the shortest env value that is masked: shorter values are no secret, and
// masking them would garble ordinary output.
const MinSecret = 4

// Secrets picks the env values to mask, longest first so that a value containing another is
// masked whole.
func Secrets(env map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range env {
		if len(v) >= MinSecret && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// MaskString replaces every secret in s.
func MaskString(s string, secrets []string) string {
	if len(secrets) == 0 {
		return s
	}
	return string(compile(secrets).mask(nil, []byte(s), true))
}

// MaskJSON replaces every secret in the strings (values and keys) of a JSON value.
func MaskJSON(raw json.RawMessage, secrets []string) json.RawMessage {
	if len(secrets) == 0 || len(raw) == 0 {
		return raw
	}
	m := compile(secrets)
	maskString := func(s string) string { return string(m.mask(nil, []byte(s), true)) }
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return json.RawMessage(maskString(string(raw)))
	}
	var walk func(any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			return maskString(x)
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		case map[string]any:
			m := make(map[string]any, len(x))
			for k, e := range x {
				m[maskString(k)] = walk(e)
			}
			return m
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return raw
	}
	return out
}

// maskWriter masks secrets in a stream before passing it on. A secret may arrive split
// across writes, so it holds back an end of the stream that could be the start of one (at
// most the longest form less one byte) until more come or Flush; the rest goes on at once,
// so live readers are not kept waiting. What it writes does not depend on how the stream
// was split into writes.
type maskWriter struct {
	w   io.Writer
	m   *masker
	buf []byte // held back: it could begin a secret
	out []byte
}

func newMaskWriter(w io.Writer, secrets []string) io.Writer {
	if len(secrets) == 0 {
		return w
	}
	return &maskWriter{w: w, m: compile(secrets)}
}

func (m *maskWriter) Write(p []byte) (int, error) {
	m.buf = append(m.buf, p...)
	var n int
	m.out, n = m.m.maskPrefix(m.out[:0], m.buf, false)
	m.buf = append(m.buf[:0], m.buf[n:]...)
	if len(m.out) > 0 {
		if _, err := m.w.Write(m.out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush writes what is held back.
func (m *maskWriter) Flush() error {
	m.out = m.m.mask(m.out[:0], m.buf, true)
	m.buf = m.buf[:0]
	_, err := m.w.Write(m.out)
	return err
}

func flush(w io.Writer) error {
	if m, ok := w.(*maskWriter); ok {
		return m.Flush()
	}
	return nil
}
