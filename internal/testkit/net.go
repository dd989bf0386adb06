package testkit

import (
	"net"
	"testing"
)

// Greeter listens on the host's loopback until t ends and writes msg to every connection:
// a sandbox that reaches it reads msg. It answers the port.
func Greeter(t testing.TB, msg string) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for c, err := ln.Accept(); err == nil; c, err = ln.Accept() {
			c.Write([]byte(msg))
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
