//go:build linux

package microvm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCpio writes an archive and reads it back as the kernel does: newc headers, names and
// data padded to 4 bytes, a trailer.
func TestCpio(t *testing.T) {
	files := []cpioFile{{name: "dev", mode: 0o40755}, {name: "dev/console", mode: 0o20600, major: 5, minor: 1},
		{name: "init", mode: 0o100111, data: []byte("abcde")}, {name: "lib/x", mode: 0o100444, data: []byte("1234")}}
	var buf bytes.Buffer
	if err := writeCpio(&buf, files); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	var got []cpioFile
	for off := 0; ; {
		if off%4 != 0 || len(b) < off+110 || string(b[off:off+6]) != "070701" {
			t.Fatalf("no header at %d", off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return uint32(v)
		}
		mode, size, major, minor, namesize := field(1), field(6), field(9), field(10), field(11)
		name := string(b[off+110 : off+110+int(namesize)-1])
		off = (off + 110 + int(namesize) + 3) &^ 3
		data := b[off : off+int(size)]
		off = (off + int(size) + 3) &^ 3
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			break
		}
		got = append(got, cpioFile{name: name, mode: mode, major: major, minor: minor, data: data})
	}
	if fmt.Sprint(got) != fmt.Sprint(files) {
		t.Errorf("read back %v, want %v", got, files)
	}
}

// TestQMP runs the client against a scripted QEMU monitor: the greeting, capabilities, a
// command passing a descriptor, an error, and an event waited for.
func TestQMP(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := net.FileConn(os.NewFile(uintptr(fds[0]), "mine"))
	if err != nil {
		t.Fatal(err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "qemu")
	qemu, _ := net.FileConn(theirs)
	theirs.Close()
	got := make(chan string, 4)
	go func() {
		uc := qemu.(*net.UnixConn)
		uc.Write([]byte(`{"QMP": {"version": {}, "capabilities": []}}` + "\n"))
		buf, oob := make([]byte, 4096), make([]byte, 128)
		for {
			n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			var cmd struct{ Execute string }
			json.Unmarshal(buf[:n], &cmd)
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			got <- fmt.Sprintf("%s fds=%d", cmd.Execute, len(msgs))
			switch cmd.Execute {
			case "stop":
				uc.Write([]byte(`{"event": "STOP", "data": {}}` + "\n" + `{"error": {"class": "GenericError", "desc": "no"}}` + "\n"))
			default:
				uc.Write([]byte(`{"return": {"status": "running"}}` + "\n"))
			}
			if cmd.Execute == "getfd" {
				uc.Write([]byte(`{"event": "VSERPORT_CHANGE", "data": {"id": "channel", "open": true}}` + "\n"))
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := newQMP(ctx, mine.(*net.UnixConn))
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	if s := <-got; s != "qmp_capabilities fds=0" {
		t.Errorf("first command %q", s)
	}
	mark := q.mark()
	f, _ := os.Open(os.DevNull)
	defer f.Close()
	out, err := q.run(ctx, "getfd", map[string]string{"fdname": "x"}, f)
	if err != nil || !bytes.Contains(out, []byte("running")) {
		t.Errorf("getfd: %s %v", out, err)
	}
	if s := <-got; s != "getfd fds=1" {
		t.Errorf("getfd arrived as %q", s)
	}
	if err := q.waitEvent(ctx, mark, func(ev qmpEvent) bool { return ev.Event == "VSERPORT_CHANGE" }); err != nil {
		t.Errorf("event: %v", err)
	}
	if _, err := q.run(ctx, "stop", nil, nil); err == nil || !bytes.Contains([]byte(err.Error()), []byte("GenericError: no")) {
		t.Errorf("an error answer: %v", err)
	}
	<-got
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer wcancel()
	if err := q.waitEvent(wctx, q.mark(), func(ev qmpEvent) bool { return ev.Event == "STOP" }); err == nil {
		t.Error("an event from before the mark counted")
	}
}

// TestWaitReadyQEMUEnded: when QEMU ends before the agent's Hello, waitReady says so with
// QEMU's wait status and what it printed, as the error Start boots once more on.
func TestWaitReadyQEMUEnded(t *testing.T) {
	ours, theirs := net.Pipe()
	defer ours.Close()
	defer theirs.Close()
	exited := make(chan struct{})
	close(exited)
	err := waitReady(context.Background(), ours, exited, func() string { return "signal: killed" })
	var ended *qemuEnded
	if !errors.As(err, &ended) {
		t.Fatalf("waitReady after QEMU ended: %v (%T), want a *qemuEnded", err, err)
	}
	if want := "QEMU ended (signal: killed) before the agent spoke"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}
