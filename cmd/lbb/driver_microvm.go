//go:build linux

package main

import "github.com/littlebigbrain/lbb/internal/runtime/microvm"

// The microvm driver starts each sandbox's QEMU through a jail, by re-executing this binary;
// MaybeJail takes over such an invocation before anything else runs.
func init() { hooks = append(hooks, microvm.MaybeJail) }
