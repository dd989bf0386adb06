//go:build linux

package main

import (
	"strings"
	"testing"
)

// TestHostListenTLS: lbb host serves an address off loopback only over TLS; it refuses
// before it opens anything.
func TestHostListenTLS(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:7702", ":7702", "10.0.0.11:7702", "[::]:7702", "host-a.example.org:7702"} {
		err := runHost(t.Context(), []string{"--listen", listen, "--token", "t", "--data-dir", t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "--tls-cert") {
			t.Errorf("lbb host --listen %s without TLS: %v, want a refusal", listen, err)
		}
	}
	for _, listen := range []string{"127.0.0.1:7702", "localhost:0", "[::1]:7702"} {
		if !loopbackListen(listen) {
			t.Errorf("%s is loopback", listen)
		}
	}
}
