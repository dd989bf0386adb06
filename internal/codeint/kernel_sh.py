# lbb's shell context driver: runs inside the sandbox and keeps ONE bash for the context, so a
# cell's cd, exports, variables, functions and aliases stay for the next. It speaks the other
# drivers' protocol: requests on stdin ({"id", "code", "timeout_ms"}), events on stdout
# (stdout, stderr, error, end). Each cell is a file bash sources (stdin /dev/null); after it,
# bash writes the status on a pipe of its own (fd 3) and a marker on stdout and stderr, so the
# end comes after all the cell wrote. A timeout sends SIGINT to bash's process group (bash runs
# in a session of its own): the cell's commands die, bash's INT trap returns from the cell.
import json, os, select, shutil, signal, subprocess, sys, tempfile, threading, time

proto = os.fdopen(os.dup(1), "w", buffering=1)
lock = threading.Lock()

def emit(ev):
    with lock:
        proto.write(json.dumps(ev, separators=(",", ":")) + "\n")

tmp = tempfile.mkdtemp(prefix="lbb-shell-")
nonce = os.urandom(8).hex()
MARK = ("\x1elbb-end-%s\x1e" % nonce).encode()
current = [None]
state = {}

def start():
    sr, sw = os.pipe()
    p = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, pass_fds=(sw,), start_new_session=True)
    os.close(sw)
    state.update(p=p, status=os.fdopen(sr, "rb", buffering=0), marks=threading.Semaphore(0))
    for name, f in (("stdout", p.stdout), ("stderr", p.stderr)):
        threading.Thread(target=pump, args=(name, f, state["marks"]), daemon=True).start()
    p.stdin.write(b"exec 3>&%d %d>&-; shopt -s expand_aliases; PS1=; PS2=\n" % (sw, sw))
    p.stdin.flush()

def pump(name, f, marks):
    buf = b""
    while True:
        chunk = os.read(f.fileno(), 65536)
        if not chunk:
            if buf:
                emit({"id": current[0], "type": name, "text": buf.decode("utf-8", "replace")})
            return
        buf += chunk
        while True:
            i = buf.find(MARK)
            if i < 0:
                break
            if i:
                emit({"id": current[0], "type": name, "text": buf[:i].decode("utf-8", "replace")})
            buf = buf[i + len(MARK):]
            marks.release()
        # Hold back only what may begin a marker; the rest goes out now.
        keep = 0
        j = buf.rfind(b"\x1e")
        if j >= 0 and MARK.startswith(buf[j:]):
            keep = len(buf) - j
        out, buf = buf[:len(buf) - keep], buf[len(buf) - keep:]
        # Do not split a UTF-8 sequence: hold back an incomplete last one.
        k = len(out)
        while k > 0 and k > len(out) - 4 and (out[k - 1] & 0xC0) == 0x80:
            k -= 1
        if k > 0 and out[k - 1] >= 0xC0:
            lead = out[k - 1]
            need = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
            if len(out) - (k - 1) < need:
                out, buf = out[:k - 1], out[k - 1:] + buf
        if out:
            emit({"id": current[0], "type": name, "text": out.decode("utf-8", "replace")})

def read_status(deadline):
    """Reads bash's status line; None when the deadline passes first, "" when bash ended."""
    fd = state["status"].fileno()
    line = b""
    while True:
        wait = None if deadline is None else max(0, deadline - time.monotonic())
        r, _, _ = select.select([fd], [], [], wait)
        if not r:
            return None
        b = os.read(fd, 64)
        if not b:
            return ""
        line += b
        if b"\n" in line:
            return line.split(b"\n")[0].decode()

def group(pid):
    """The processes of bash's process group but bash."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != pid:
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read().rsplit(")", 1)[1].split()
                if int(st[2]) == pid:
                    out.append(int(d))
            except Exception:  # noqa: BLE001
                pass
    return out

count = 0

def cell(req):
    global count
    count += 1
    rid = req.get("id")
    current[0] = rid
    ms = req.get("timeout_ms") or 0
    path = os.path.join(tmp, "cell.sh")
    with open(path, "w") as f:
        f.write(req.get("code", "") + "\n")
    p = state["p"]
    script = ("trap 'trap - INT; return 130' INT; . %s </dev/null; __lbb_s=$?; trap - INT; "
              "printf '%%s' '%s'; printf '%%s' '%s' >&2; echo $__lbb_s >&3\n") % (path, MARK.decode(), MARK.decode())
    try:
        p.stdin.write(script.encode())
        p.stdin.flush()
    except OSError:
        pass
    deadline = time.monotonic() + ms / 1000.0 if ms > 0 else None
    status = read_status(deadline)
    timed_out = False
    if status is None:
        timed_out = True
        try:
            os.killpg(p.pid, signal.SIGINT)
        except OSError:
            pass
        status = read_status(time.monotonic() + 2)
        if status is None:
            # Something ignores SIGINT: its processes get SIGKILL, bash another SIGINT.
            for pid in group(p.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                os.kill(p.pid, signal.SIGINT)
            except OSError:
                pass
            status = read_status(time.monotonic() + 3)
    if status:
        for _ in range(2):
            state["marks"].acquire(timeout=2)
    if status == "" or status is None:
        # bash ended (the cell ran exit) or is stuck: a fresh one; state is gone.
        code = p.poll()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        p.wait()
        time.sleep(0.05)
        why = "the shell exited with status %s" % code if code is not None else "the shell did not answer"
        emit({"id": rid, "type": "error", "name": "ShellExited",
              "value": why + "; a new shell started (cwd, variables and functions are reset)", "traceback": []})
        start()
        emit({"id": rid, "type": "end", "status": "timeout" if timed_out else "error", "execution_count": count})
        return
    if timed_out:
        emit({"id": rid, "type": "error", "name": "TimeoutError",
              "value": "the cell passed its timeout of %d ms (interrupted; the shell keeps its state)" % ms, "traceback": []})
        emit({"id": rid, "type": "end", "status": "timeout", "execution_count": count})
        return
    if status.strip() != "0":
        emit({"id": rid, "type": "error", "name": "ExitStatus",
              "value": "the cell's last command exited with status %s" % status.strip(), "traceback": []})
        emit({"id": rid, "type": "end", "status": "error", "execution_count": count})
        return
    emit({"id": rid, "type": "end", "status": "ok", "execution_count": count})

try:
    start()
except Exception as e:  # noqa: BLE001
    emit({"type": "fatal", "value": "bash: %s" % e})
    sys.exit(3)
emit({"type": "ready", "pid": state["p"].pid})
for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    try:
        req = json.loads(line)
    except ValueError as e:
        emit({"type": "fatal", "value": "a request that is not JSON: %s" % e})
        continue
    cell(req)
    current[0] = None
try:
    os.killpg(state["p"].pid, signal.SIGKILL)
except OSError:
    pass
shutil.rmtree(tmp, ignore_errors=True)
