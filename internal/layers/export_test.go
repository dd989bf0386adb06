//go:build linux

package layers

var ResolvedOf = resolvedOf
