package hostagent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
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

// A secret is masked in the forms a program commonly prints it in, each a form below:
//
//   - as it is, or percent-encoded (each byte literal or %XX in either case, a space also
//     "+"), which covers URL query and path escaping;
//   - hex, each digit in either case;
//   - base64, std or URL alphabet, with or without padding ('+', '/' and '=' may also be
//     percent-encoded). Base64 of a value depends on where it falls in the encoded stream
//     (its offset mod 3), so there is one form per alignment: the characters that only the
//     value's bits decide, and, when the value ends the encoded data, its last character and
//     padding too. A few bits at each end of the value (up to 2 characters) stay visible.
//
// Anything else (another encoding, a secret split, reversed, compressed or encrypted) is not
// caught; README.md says so.

// A form matches one way of writing a secret: a sequence of positions, each matched by any
// of its alternatives; a match may end at any position where end is true.
type form struct {
	pos   [][]string
	end   []bool // end[i]: a match may end after i positions
	first [256]bool
}

func (f *form) maxLen() int {
	n := 0
	for _, alts := range f.pos {
		n += len(longest(alts))
	}
	return n
}

// minLen is the length of the shortest match.
func (f *form) minLen() int {
	n := 0
	for i, alts := range f.pos {
		if f.end[i] {
			return n
		}
		short := len(alts[0])
		for _, a := range alts {
			short = min(short, len(a))
		}
		n += short
	}
	return n
}

func longest(alts []string) string {
	l := ""
	for _, a := range alts {
		if len(a) > len(l) {
			l = a
		}
	}
	return l
}

func newForm(pos [][]string, ends ...int) form {
	f := form{pos: pos, end: make([]bool, len(pos)+1)}
	for _, e := range ends {
		f.end[e] = true
	}
	for _, a := range pos[0] {
		f.first[a[0]] = true
	}
	return f
}

// percent is c literal or %XX, upper and lower case.
func percent(c byte) []string {
	alts := []string{string([]byte{c}), fmt.Sprintf("%%%02X", c)} // string(c) would be UTF-8
	if lower := fmt.Sprintf("%%%02x", c); lower != alts[1] {
		alts = append(alts, lower)
	}
	if c == ' ' {
		alts = append(alts, "+")
	}
	return alts
}

// forms lists the forms of secret v, but none that could match fewer than MinSecret bytes.
func forms(v string) []form {
	var out []form
	add := func(f form) {
		if f.minLen() >= MinSecret {
			out = append(out, f)
		}
	}
	lit := make([][]string, len(v))
	hex := make([][]string, 0, 2*len(v))
	for i := 0; i < len(v); i++ {
		lit[i] = percent(v[i])
		for _, d := range fmt.Sprintf("%02x", v[i]) {
			hex = append(hex, caseAlts(byte(d)))
		}
	}
	add(newForm(lit, len(lit)))
	add(newForm(hex, len(hex)))
	for align := 0; align < 3; align++ {
		enc := base64.StdEncoding.EncodeToString(append(make([]byte, align), v...))
		bits := 8 * (align + len(v))
		lo, hi := (8*align+5)/6, bits/6 // characters only v's bits decide
		raw := (bits + 5) / 6           // the last character when v ends the data
		if hi <= lo {
			continue
		}
		pos := make([][]string, 0, len(enc)-lo)
		for _, c := range []byte(enc[lo:]) {
			pos = append(pos, base64Alts(c))
		}
		add(newForm(pos, hi-lo, raw-lo, len(enc)-lo))
	}
	return out
}

func caseAlts(c byte) []string {
	if u := strings.ToUpper(string(c)); u != string(c) {
		return []string{string(c), u}
	}
	return []string{string(c)}
}

// base64Alts is a std base64 character in both alphabets, percent-encoded too where a URL
// would escape it.
func base64Alts(c byte) []string {
	switch c {
	case '+':
		return []string{"+", "-", "%2B", "%2b"}
	case '/':
		return []string{"/", "_", "%2F", "%2f"}
	case '=':
		return []string{"=", "%3D", "%3d"}
	}
	return []string{string(c)}
}

// masker finds every form of a set of secrets. It is not safe for concurrent use.
type masker struct {
	forms   []form
	byFirst [256][]int // the forms that may begin with a byte
	hold    int        // the longest form less one byte: the most a stream holds back
	st      nfa
}

func compile(secrets []string) *masker {
	m := &masker{}
	for _, v := range secrets {
		for _, f := range forms(v) {
			m.forms = append(m.forms, f)
			m.hold = max(m.hold, f.maxLen()-1)
			for c, ok := range f.first {
				if ok {
					m.byFirst[c] = append(m.byFirst[c], len(m.forms)-1)
				}
			}
		}
	}
	return m
}

// mask appends buf to out with every form masked.
func (m *masker) mask(out, buf []byte, final bool) []byte {
	out, _ = m.maskPrefix(out, buf, final)
	return out
}

// maskPrefix appends to out the masked start of buf: all of it when final, else up to where
// a form could still begin a match that more bytes would decide; it returns how much of buf
// it took. Matches are leftmost-longest, so the result is the same however a stream is cut.
func (m *masker) maskPrefix(out, buf []byte, final bool) ([]byte, int) {
	i := 0
	for i < len(buf) {
		candidates := m.byFirst[buf[i]]
		if len(candidates) == 0 {
			out = append(out, buf[i])
			i++
			continue
		}
		best, open := 0, false
		for _, k := range candidates {
			n, more := m.st.match(&m.forms[k], buf[i:])
			best, open = max(best, n), open || more
		}
		if open && !final {
			return out, i
		}
		if best > 0 {
			out = append(out, Mask...)
			i += best
			continue
		}
		out = append(out, buf[i])
		i++
	}
	return out, i
}

// nfa runs a form over bytes; its slices are reused between runs.
type nfa struct{ cur, next []state }

type state struct{ p, a, o int } // at position p, alternative a, o bytes of it matched

// match returns the length of the longest match of f at the start of b (0 if none) and
// whether a match could still go on past the end of b.
func (st *nfa) match(f *form, b []byte) (int, bool) {
	st.cur = st.cur[:0]
	for a, alt := range f.pos[0] {
		if alt[0] == b[0] {
			st.cur = append(st.cur, state{0, a, 0})
		}
	}
	best := 0
	for i := 0; i < len(b) && len(st.cur) > 0; i++ {
		st.next = st.next[:0]
		for _, s := range st.cur {
			alt := f.pos[s.p][s.a]
			if alt[s.o] != b[i] {
				continue
			}
			if s.o++; s.o < len(alt) {
				st.add(s)
				continue
			}
			p := s.p + 1
			if f.end[p] {
				best = i + 1
			}
			if p < len(f.pos) {
				for a := range f.pos[p] {
					st.add(state{p, a, 0})
				}
			}
		}
		st.cur, st.next = st.next, st.cur
	}
	return best, len(st.cur) > 0
}

func (st *nfa) add(s state) {
	for _, t := range st.next {
		if t == s {
			return
		}
	}
	st.next = append(st.next, s)
}
