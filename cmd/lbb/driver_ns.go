//go:build linux

package main

import "github.com/littlebigbrain/lbb/internal/runtime/ns"

// The ns driver starts each sandbox's init by re-executing this binary; MaybeInit takes over
// such an invocation before anything else runs.
func init() { hooks = append(hooks, ns.MaybeInit) }
