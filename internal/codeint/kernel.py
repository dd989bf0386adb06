# lbb's Python context driver: runs inside the sandbox, starts an ipykernel (Debian's
# python3-ipykernel) through jupyter_client, and speaks one JSON object a line with the host:
# requests on stdin ({"id", "code", "timeout_ms"}), events on stdout ({"id", "type", ...}:
# stdout, stderr, result, display, error, end; "ready" once the kernel answers).
import json, os, queue, sys, tempfile, time

proto = os.fdopen(os.dup(1), "w", buffering=1)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 1)  # nothing but events reaches the host's channel

def emit(ev):
    proto.write(json.dumps(ev, separators=(",", ":")) + "\n")

try:
    from jupyter_client.manager import KernelManager
except Exception as e:  # noqa: BLE001
    emit({"type": "fatal", "value": "jupyter_client: %s" % e})
    sys.exit(3)

rt = tempfile.mkdtemp(prefix="lbb-kernel-")
os.environ["JUPYTER_RUNTIME_DIR"] = rt
env = dict(os.environ)
env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(rt, "k"),
                   connection_file=os.path.join(rt, "kernel.json"))
km.start_kernel(env=env, cwd=os.getcwd(), stdout=null, stderr=null, stdin=null)
kc = km.client()
kc.start_channels()
try:
    kc.wait_for_ready(timeout=60)
except Exception as e:  # noqa: BLE001
    emit({"type": "fatal", "value": "the kernel did not start: %s" % e})
    km.shutdown_kernel(now=True)
    sys.exit(3)
# Figures in the inline backend come back as image/png at the end of a cell.
# A figure comes back at the size it was made (figsize × dpi), not cropped to its drawing.
kc.execute("%colors NoColor\n%config InlineBackend.figure_formats = ['png']\n"
           "%config InlineBackend.print_figure_kwargs = {'bbox_inches': None}", silent=True, store_history=False)
emit({"type": "ready", "pid": km.provisioner.pid if km.provisioner else None})


def drain_shell(msg_id, wait):
    end = time.monotonic() + wait
    while time.monotonic() < end:
        try:
            m = kc.get_shell_msg(timeout=max(0.01, end - time.monotonic()))
        except queue.Empty:
            return None
        if m["parent_header"].get("msg_id") == msg_id:
            return m
    return None


def cell(req):
    rid = req.get("id")
    timeout = (req.get("timeout_ms") or 0) / 1000.0
    msg_id = kc.execute(req.get("code", ""), store_history=True, allow_stdin=False, stop_on_error=False)
    deadline = time.monotonic() + timeout if timeout > 0 else None
    count, status, interrupted = None, "ok", False
    while True:
        # At most a second at a time: a kernel that died (out of memory) sends nothing more.
        wait = 1.0 if deadline is None else min(1.0, max(0.0, deadline - time.monotonic()))
        try:
            m = kc.get_iopub_msg(timeout=wait)
        except queue.Empty:
            if not km.is_alive():
                emit({"id": rid, "type": "error", "name": "KernelDied", "value": "the kernel died; the context restarts", "traceback": []})
                km.restart_kernel(now=True)
                kc.wait_for_ready(timeout=60)
                status = "died"
                break
            if deadline is None or time.monotonic() < deadline:
                continue
            if not interrupted:
                km.interrupt_kernel()
                interrupted, status = True, "timeout"
                deadline = time.monotonic() + 5
                continue
            # SIGINT did not stop it (a C loop that ignores it): a fresh kernel.
            emit({"id": rid, "type": "error", "name": "TimeoutError", "value": "the cell did not stop at its timeout; the context restarted", "traceback": []})
            km.restart_kernel(now=True)
            kc.wait_for_ready(timeout=60)
            break
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        t, c = m["msg_type"], m["content"]
        if t == "stream":
            emit({"id": rid, "type": "stderr" if c.get("name") == "stderr" else "stdout", "text": c.get("text", "")})
        elif t == "execute_input":
            count = c.get("execution_count")
        elif t == "execute_result":
            emit({"id": rid, "type": "result", "data": c.get("data", {}), "execution_count": c.get("execution_count")})
        elif t in ("display_data", "update_display_data"):
            emit({"id": rid, "type": "display", "data": c.get("data", {})})
        elif t == "error":
            if status == "ok":
                status = "error"
            emit({"id": rid, "type": "error", "name": c.get("ename", ""), "value": c.get("evalue", ""), "traceback": c.get("traceback", [])})
        elif t == "status" and c.get("execution_state") == "idle":
            break
    drain_shell(msg_id, 0.5)
    emit({"id": rid, "type": "end", "status": status, "execution_count": count})


try:
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError as e:
            emit({"type": "fatal", "value": "a request that is not JSON: %s" % e})
            continue
        try:
            cell(req)
        except Exception as e:  # noqa: BLE001
            emit({"id": req.get("id"), "type": "error", "name": type(e).__name__, "value": str(e), "traceback": []})
            emit({"id": req.get("id"), "type": "end", "status": "error", "execution_count": None})
finally:
    try:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    except Exception:  # noqa: BLE001
        pass
