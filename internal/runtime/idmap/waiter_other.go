//go:build linux && !amd64

package idmap

// waiter is tracedChild where there is no waiter of our own.
func waiter() (pid int, wait func(), err error) { return tracedChild() }
