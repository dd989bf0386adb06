//go:build !linux

package pool

import (
	"errors"

	"github.com/littlebigbrain/lbb/internal/runtime"
)

func canRename(runtime.Driver) bool { return false }

func setHostname(runtime.Sandbox, string) error {
	return errors.New("renaming a sandbox needs Linux")
}
