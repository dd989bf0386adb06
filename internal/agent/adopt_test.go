package agent_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// fakeForkedPy plays an interpreter the host's zygote forked (and its parent): it connects to
// the agent's socket (argv 1), claims a pid (argv 2; 0: its own), passes its pipe ends and a
// control socket, says ready, answers its request with what it was told, and reports its exit
// on the control socket as the zygote's child does.
const fakeForkedPy = `import os, socket, json, sys, time
name, claim = sys.argv[1], int(sys.argv[2])
os.setpgid(0, 0)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
for _ in range(500):
    try:
        s.connect("\0" + name)
        break
    except (ConnectionRefusedError, FileNotFoundError):
        time.sleep(0.01)
reqR, reqW = os.pipe(); resR, resW = os.pipe(); outR, outW = os.pipe(); errR, errW = os.pipe()
a, b = socket.socketpair()
socket.send_fds(s, [json.dumps({"pid": claim or os.getpid()}).encode()], [reqW, resR, outR, errR, b.fileno()])
setup = s.recv(65536)
if not setup:
    sys.exit(3)
cfg = json.loads(setup)
for fd in (reqW, resR, outR, errR):
    os.close(fd)
b.close()
os.write(resW, b"ready\n")
req = json.loads(os.fdopen(reqR, "rb").read())
os.write(outW, b"hello\n")
os.write(resW, json.dumps({"ok": True, "exit": 0}).encode() + b"\n" + json.dumps({"cwd": cfg["cwd"], "code": req["code"], "path": "PATH" in cfg["env"]}).encode())
for fd in (resW, outW, errW):
    os.close(fd)
a.sendall(json.dumps({"status": 0, "utime_us": 1000, "stime_us": 0, "maxrss": 1}).encode() + b"\n")
`

// TestPrestartAdopt: with ZygoteSocket the agent adopts an interpreter that connects to it
// (one that claims another pid is refused), answers it its environment and working
// directory, and runs the next python run in it, its exit read from its parent's socket.
func TestPrestartAdopt(t *testing.T) {
	testkit.RequiresRoot(t) // the agent takes uid 0 only
	ta := startPython(t)
	fake := func(name, claim string) *exec.Cmd {
		cmd := exec.Command("python3", "-c", fakeForkedPy, name, claim)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	bad := fmt.Sprintf("lbb-adopt-bad-%d", os.Getpid())
	cmd := fake(bad, "1")
	if err := ta.c.Prestart(ctxT(t), agent.PrestartRequest{Language: "python", ZygoteSocket: bad}); err == nil {
		t.Error("an interpreter that claims another pid was adopted")
	}
	cmd.Wait()
	if err := ta.c.Prestart(ctxT(t), agent.PrestartRequest{Language: "python", ZygoteSocket: "bad name"}); !agent.IsCode(err, agent.CodeInvalid) {
		t.Errorf("socket name with a space: %v, want %s", err, agent.CodeInvalid)
	}

	good := fmt.Sprintf("lbb-adopt-%d", os.Getpid())
	cmd = fake(good, "0")
	defer cmd.Wait()
	if err := ta.c.Prestart(ctxT(t), agent.PrestartRequest{Language: "python", ZygoteSocket: good}); err != nil {
		t.Fatal(err)
	}
	out, errOut, ex := ta.run(t, agent.RunRequest{Language: "python", Code: "adopted"})
	var r struct {
		Cwd, Code string
		Path      bool
	}
	if !ex.OK || ex.ExitCode != 0 || json.Unmarshal(ex.Result, &r) != nil || r.Code != "adopted" || r.Cwd != ta.ws || !r.Path || out != "hello\n" {
		t.Errorf("run in the adopted interpreter: %+v %q %q (result %s)", ex, out, errOut, ex.Result)
	}
}
