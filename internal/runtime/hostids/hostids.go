//go:build linux

// Package hostids gives each sandbox host ids of its own: a range of runtime.IDCount user ids
// (and the same group ids) that no other sandbox on this host holds, claimed in a registry
// every lbb process of the host shares.
//
// A sandbox's range is its identity on the host. Its user namespace is owned by the range's
// first id, so that what the kernel counts per user (inotify instances and watches, queued
// signals, message queue bytes, processes) is charged to the sandbox and not to the host's
// root; and where the host can make idmapped mounts, its ids map onto the range, so that a
// process that escaped one sandbox holds none of another's files (see internal/runtime/idmap).
//
// The registry is a directory of symbolic links: <Dir>/<n> names range n and points at its
// owner, the state directory of the sandbox that holds it. A claim whose owner is gone (a
// sandbox removed by a process that died before releasing it) is free again.
package hostids

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/runtime"
)

// Range is Count host ids from Base, as user ids and as group ids.
type Range struct {
	Base  uint32 `json:"base"`
	Count uint32 `json:"count"`
}

// Shared is the range base images are stored with, and the one every sandbox maps where the
// host cannot give each its own (no idmapped mounts).
var Shared = Range{Base: runtime.IDBase, Count: runtime.IDCount}

// DefaultDir is the registry of this host.
const DefaultDir = "/var/lib/lbb/ids"

// Ranges above Shared, up to (not including) uid 2^31: some programs take ids for signed
// 32-bit numbers.
const maxRanges = int((1<<31 - runtime.IDBase) / runtime.IDCount)

// rangeN is range n (1..maxRanges-1).
func rangeN(n int) Range {
	return Range{Base: runtime.IDBase + uint32(n)*runtime.IDCount, Count: runtime.IDCount}
}

// Registry hands out ranges. The zero value uses DefaultDir.
type Registry struct {
	Dir string
}

func (g Registry) dir() string {
	if g.Dir == "" {
		return DefaultDir
	}
	return g.Dir
}

// Claim gives owner (a sandbox's state directory, absolute) a free range. The first claim
// of a process also frees every claim whose owner is gone (see Sweep).
func (g Registry) Claim(owner string) (Range, error) {
	if err := os.MkdirAll(g.dir(), 0o700); err != nil {
		return Range{}, fmt.Errorf("host id registry: %w", err)
	}
	if _, swept := sweptDirs.LoadOrStore(g.dir(), true); !swept {
		if err := g.Sweep(); err != nil {
			return Range{}, err
		}
	}
	// Probing from a random place finds a free range in a few tries while the registry is
	// far from full, without listing it.
	start := 1 + rand.IntN(maxRanges-1)
	for i := range maxRanges - 1 {
		n := 1 + (start-1+i)%(maxRanges-1)
		ok, err := g.take(n, owner)
		if err != nil {
			return Range{}, err
		}
		if ok {
			return rangeN(n), nil
		}
	}
	return Range{}, errors.New("host id registry: every range is held")
}

// Keep makes sure owner still holds r (a claim lost with a reset registry is taken again);
// false when another owner holds it now.
func (g Registry) Keep(r Range, owner string) (bool, error) {
	n, ok := number(r)
	if !ok {
		return false, nil
	}
	if err := os.MkdirAll(g.dir(), 0o700); err != nil {
		return false, fmt.Errorf("host id registry: %w", err)
	}
	return g.take(n, owner)
}

// Release gives back r when owner holds it.
func (g Registry) Release(r Range, owner string) error {
	n, ok := number(r)
	if !ok {
		return nil
	}
	p := filepath.Join(g.dir(), strconv.Itoa(n))
	if cur, err := os.Readlink(p); err != nil || cur != owner {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("host id registry: %w", err)
	}
	return nil
}

// sweptDirs are the registries this process has swept.
var sweptDirs sync.Map

// Sweep frees every claim whose owner is gone: sandboxes whose state directory was removed
// without their release (a test's temporary data directory, a process that died).
func (g Registry) Sweep() error {
	unlock, err := g.lock()
	if err != nil {
		return err
	}
	defer unlock()
	ents, err := os.ReadDir(g.dir())
	if err != nil {
		return fmt.Errorf("host id registry: %w", err)
	}
	for _, e := range ents {
		p := filepath.Join(g.dir(), e.Name())
		cur, err := os.Readlink(p)
		if err != nil || !filepath.IsAbs(cur) {
			continue
		}
		if _, err := os.Lstat(cur); errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(p)
		}
	}
	return nil
}

// HeldBy lists the ranges owner holds (a destroyed sandbox holds none).
func (g Registry) HeldBy(owner string) []Range {
	ents, _ := os.ReadDir(g.dir())
	var out []Range
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n <= 0 || n >= maxRanges {
			continue
		}
		if cur, err := os.Readlink(filepath.Join(g.dir(), e.Name())); err == nil && cur == owner {
			out = append(out, rangeN(n))
		}
	}
	return out
}

func number(r Range) (int, bool) {
	if r.Count != runtime.IDCount || r.Base <= runtime.IDBase || (r.Base-runtime.IDBase)%runtime.IDCount != 0 {
		return 0, false
	}
	n := int((r.Base - runtime.IDBase) / runtime.IDCount)
	return n, n < maxRanges
}

// take claims range n for owner: true when owner holds it now.
func (g Registry) take(n int, owner string) (bool, error) {
	p := filepath.Join(g.dir(), strconv.Itoa(n))
	err := os.Symlink(owner, p)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return false, fmt.Errorf("host id registry: %w", err)
	}
	cur, err := os.Readlink(p)
	if err != nil {
		return false, nil // being replaced: another range
	}
	if cur == owner {
		return true, nil
	}
	if _, err := os.Lstat(cur); err == nil || !filepath.IsAbs(cur) {
		return false, nil
	}
	// The owner is gone: replace the claim, under the registry's lock, so that of two
	// processes that both found it stale only one takes it.
	unlock, err := g.lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	if again, err := os.Readlink(p); err != nil || again != cur {
		return false, nil
	}
	if err := os.Remove(p); err != nil {
		return false, nil
	}
	// A claimer that found the range free meanwhile wins: this one probes on.
	return os.Symlink(owner, p) == nil, nil
}

func (g Registry) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(g.dir(), ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("host id registry: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("host id registry: %w", err)
	}
	return func() { f.Close() }, nil
}
