//go:build linux

package gvisor

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAcceptAgent: callers that say nothing or the wrong thing on the agent's socket are
// dropped without holding up the agent, whose connection comes through with its bytes intact.
func TestAcceptAgent(t *testing.T) {
	dir := t.TempDir()
	ln, err := listenAgent(dir, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const token = "0123456789abcdef"
	path := filepath.Join(dir, agentSocket)
	var silent []net.Conn
	for range 20 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	wrong, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(wrong, strings.Repeat("x", len(token))+"\n")
	go func() {
		time.Sleep(100 * time.Millisecond)
		c, err := net.Dial("unix", path)
		if err != nil {
			return
		}
		io.WriteString(c, token+"\nhello")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	c, err := acceptAgent(ctx, ln, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d := time.Since(t0); d > time.Second {
		t.Errorf("the agent waited %v behind silent callers", d)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Errorf("after the token: %q %v", buf, err)
	}
	if _, err := wrong.Read(buf); err == nil {
		t.Error("a caller with a wrong token was not dropped")
	}
}

func TestAcceptAgentExited(t *testing.T) {
	ln, err := listenAgent(t.TempDir(), os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	exited := make(chan struct{})
	close(exited)
	if _, err := acceptAgent(context.Background(), ln, "t", exited); err != errExited {
		t.Errorf("acceptAgent = %v, want errExited", err)
	}
}

func TestParsePS(t *testing.T) {
	out := `UID       PID       PPID      PGID      C         TTY       STIME     TIME      CMD
0         1         0         1         0         ?         17:07     10ms      agent
0         12        1         12        93        ?         17:07     1.2s      python3`
	ps, err := parsePS(out)
	if err != nil || len(ps) != 2 || ps[1].PID != 12 || ps[1].PPID != 1 || ps[1].C != 93 || ps[1].Cmd != "python3" {
		t.Fatalf("parsePS = %+v, %v", ps, err)
	}
	if _, err := parsePS("garbage"); err == nil {
		t.Error("parsePS accepted garbage")
	}
}

func TestPickVictims(t *testing.T) {
	ps := []runscProcess{{PID: 1, C: 99}, {PID: 5, C: 10}, {PID: 7, C: 90}, {PID: 9, C: 90}}
	if v := pickVictims(ps, map[int]bool{}, false); len(v) != 1 || v[0] != 9 {
		t.Errorf("first victim %v, want [9] (busiest, youngest; never PID 1)", v)
	}
	if v := pickVictims(ps, map[int]bool{9: true, 7: true}, false); len(v) != 1 || v[0] != 5 {
		t.Errorf("next victim %v, want [5]", v)
	}
	if v := pickVictims(ps, map[int]bool{}, true); len(v) != 3 {
		t.Errorf("all victims %v, want every process but PID 1", v)
	}
	if v := pickVictims(ps[:1], map[int]bool{}, false); len(v) != 0 {
		t.Errorf("victims %v of the agent alone", v)
	}
}

func TestSeccompProgram(t *testing.T) {
	b, err := seccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 || len(b)%8 != 0 {
		t.Fatalf("program of %d bytes", len(b))
	}
}
