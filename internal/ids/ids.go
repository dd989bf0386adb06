// Package ids makes and checks the ids of lbb's records: a type prefix and a lower-case ULID,
// so that ids sort by creation time and say what they name.
package ids

import (
	"crypto/rand"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// Prefixes of each kind of id.
const (
	Sandbox  = "sbx_"
	Command  = "cmd_"
	Template = "sbt_"
	File     = "fil_"
	Key      = "key_"
	Request  = "req_"
	Audit    = "aud_"
	Snapshot = "snp_"
	Preview  = "prv_"
	Context  = "ctx_"
)

var (
	mu      sync.Mutex
	entropy = ulid.Monotonic(rand.Reader, 0)
)

// New returns a fresh id with prefix ("sbx_"; "sbx" gets its underscore).
func New(prefix string) string {
	return NewAt(prefix, time.Now())
}

// NewAt returns a fresh id with prefix whose time part is t.
func NewAt(prefix string, t time.Time) string {
	mu.Lock()
	id := ulid.MustNew(ulid.Timestamp(t), entropy)
	mu.Unlock()
	return norm(prefix) + strings.ToLower(id.String())
}

func norm(prefix string) string {
	if strings.HasSuffix(prefix, "_") {
		return prefix
	}
	return prefix + "_"
}

// Valid reports whether s is a well-formed id with prefix.
func Valid(prefix, s string) bool {
	rest, ok := strings.CutPrefix(s, norm(prefix))
	if !ok || len(rest) != ulid.EncodedSize {
		return false
	}
	_, err := ulid.ParseStrict(strings.ToUpper(rest))
	return err == nil
}

// Time returns the creation time encoded in a valid id, or the zero time.
func Time(s string) time.Time {
	i := strings.IndexByte(s, '_')
	if i < 0 {
		return time.Time{}
	}
	u, err := ulid.ParseStrict(strings.ToUpper(s[i+1:]))
	if err != nil {
		return time.Time{}
	}
	return ulid.Time(u.Time())
}
