package hostagent

import (
	"bytes"
	"encoding/json"
	"io"
	"sort"
	"strings"
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
	for _, v := range secrets {
		s = strings.ReplaceAll(s, v, Mask)
	}
	return s
}

// MaskJSON replaces every secret in the strings (values and keys) of a JSON value.
func MaskJSON(raw json.RawMessage, secrets []string) json.RawMessage {
	if len(secrets) == 0 || len(raw) == 0 {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return json.RawMessage(MaskString(string(raw), secrets))
	}
	var walk func(any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			return MaskString(x, secrets)
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		case map[string]any:
			m := make(map[string]any, len(x))
			for k, e := range x {
				m[MaskString(k, secrets)] = walk(e)
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
// most len(longest)-1 bytes) until more come or Flush; the rest goes on at once, so live
// readers are not kept waiting.
type maskWriter struct {
	w       io.Writer
	secrets [][]byte
	hold    int
	buf     []byte
}

func newMaskWriter(w io.Writer, secrets []string) io.Writer {
	if len(secrets) == 0 {
		return w
	}
	m := &maskWriter{w: w}
	for _, s := range secrets {
		m.secrets = append(m.secrets, []byte(s))
		m.hold = max(m.hold, len(s)-1)
	}
	return m
}

func (m *maskWriter) Write(p []byte) (int, error) {
	m.buf = append(m.buf, p...)
	m.replace()
	if n := len(m.buf) - m.pending(); n > 0 {
		if _, err := m.w.Write(m.buf[:n]); err != nil {
			return 0, err
		}
		m.buf = append(m.buf[:0], m.buf[n:]...)
	}
	return len(p), nil
}

// pending is how many bytes at the end of buf could begin a secret.
func (m *maskWriter) pending() int {
	for k := min(m.hold, len(m.buf)); k > 0; k-- {
		tail := m.buf[len(m.buf)-k:]
		for _, s := range m.secrets {
			if k < len(s) && bytes.HasPrefix(s, tail) {
				return k
			}
		}
	}
	return 0
}

func (m *maskWriter) replace() {
	for _, s := range m.secrets {
		if bytes.Contains(m.buf, s) {
			m.buf = bytes.ReplaceAll(m.buf, s, []byte(Mask))
		}
	}
}

// Flush writes what is held back.
func (m *maskWriter) Flush() error {
	m.replace()
	_, err := m.w.Write(m.buf)
	m.buf = m.buf[:0]
	return err
}

func flush(w io.Writer) error {
	if m, ok := w.(*maskWriter); ok {
		return m.Flush()
	}
	return nil
}
