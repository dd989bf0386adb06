//go:build linux

package nsinit

import (
	"github.com/littlebigbrain/lbb/internal/runtime/seccomp/compiled"
)

// ForkHardening is the sandbox init's hardening as parameters, for a process that applies it
// to itself in the same order (rlimits, securebits, bounding and ambient sets, no_new_privs,
// Landlock, capabilities, seccomp): the interpreters the ns driver's zygote forks into a
// sandbox. The policy stays defined here, once.
type ForkHardening struct {
	Rlimits    [][2]uint64   `json:"rlimits"`
	Securebits int           `json:"securebits"`
	LastCap    int           `json:"last_cap"`
	Landlock   *ForkLandlock `json:"landlock,omitempty"`
	// Seccomp is the filter as struct sock_filter[] (compiled.Encoded, seccomp.Encode's form).
	Seccomp []byte `json:"seccomp"`
}

// ForkLandlock is landlockPolicy.restrictThread's ruleset: Read on "/", Handled on each of
// Writable, FileAccess the rights a rule on a file (not a directory) may hold.
type ForkLandlock struct {
	Handled    uint64   `json:"handled"`
	Scoped     uint64   `json:"scoped"`
	Read       uint64   `json:"read"`
	FileAccess uint64   `json:"file_access"`
	Writable   []string `json:"writable"`
}

// HardeningFor answers the hardening of a sandbox with these limits (Config's NoFile,
// DiskMiB and WritableRoot).
func HardeningFor(noFile uint64, diskMiB int64, writableRoot bool) (ForkHardening, error) {
	h := newHardening(noFile, diskMiB, writableRoot)
	filter, err := compiled.Encoded()
	if err != nil {
		return ForkHardening{}, err
	}
	out := ForkHardening{Rlimits: h.rlimits(), Securebits: secbits, LastCap: lastCap(), Seccomp: filter}
	if abi := landlockABI(); abi > 0 {
		out.Landlock = &ForkLandlock{
			Handled: handledFS(abi), Scoped: landlockScoped(abi), Read: llRead, FileAccess: llFileAccess,
			Writable: h.Writable,
		}
	}
	return out, nil
}
