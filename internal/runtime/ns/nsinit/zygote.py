# lbb zygote: run as `python3 -c ZYGOTE HARNESS IMPORTS_JSON` by the zygote init (zygote.go),
# host uid 0 holding CAP_SYS_ADMIN alone, pivoted into the image's root (read-only).
#
# Z (this process) loads the run() harness and the default imports once, then serves spawn
# requests from the server on fd 3 (a SOCK_SEQPACKET socketpair: one JSON message with the
# sandbox's namespace and cgroup.procs files by SCM_RIGHTS) and reads nothing else. For each:
#   C (fork of Z): joins the sandbox's cgroups, user namespace (as its uid 0), mount, net, ipc,
#     uts, cgroup and pid namespaces, forks G and stays its parent: a process forked after
#     setns(pid) is reparented to the reaper of its father's pid namespace (the host's), not
#     the sandbox's PID 1, so C waits for G and reports its wait status and rusage to the
#     sandbox's agent, and relays the agent's signals to G's process group (Landlock scoping
#     keeps the agent's own domain from signalling G's).
#   G (fork of C): the interpreter. It hands the agent its pipe ends over an abstract unix
#     socket the agent listens on, takes fds 0-4 as a pre-started harness has them, drops
#     every privilege exactly as the sandbox init does (rlimits, securebits, bounding and
#     ambient sets, no_new_privs, Landlock, capabilities, seccomp; the parameters come from Go),
#     reseeds what was seeded in Z, and waits for its run like any pre-started harness.
# Nothing of a sandbox ever reaches Z: C and G close Z's socket before anything else.
import sys, os, socket, json, signal, ctypes, base64, time, select

_HARNESS = sys.argv[1]
_IMPORTS = json.loads(sys.argv[2])
_h = {"__name__": "__lbb_harness__", "__builtins__": __builtins__}
exec(compile(_HARNESS, "<string>", "exec"), _h)

import importlib, random, tempfile, resource, gc  # random: _lbb_reseed's

for _m in _IMPORTS:
    try:
        importlib.import_module(_m)
    except BaseException:
        pass
importlib.invalidate_caches()


def _warm_up():
    # What a first DataFrame or array operation loads lazily (pandas and numpy import more
    # modules at first use) is loaded once here, before the forks. G does not run it again:
    # the pages it would write (reference counts) cost each slot ~20-40 ms of CPU whether
    # its run needs them or not; a run copies the few it touches.
    try:
        np = sys.modules.get("numpy")
        pd = sys.modules.get("pandas")
        if np is not None:
            np.arange(16).reshape(4, 4).sum(axis=0).tolist()
        if pd is not None:
            df = pd.DataFrame([{"a": 1, "b": 2.5, "c": "x"}, {"a": 3, "b": 4.5, "c": "y"}])
            df.sum(numeric_only=True).to_dict()
            df.groupby("c").sum().to_dict()
            df.describe()
            repr(df)
        json.dumps({"a": [1, 2.5, "x", None]})
    except Exception:
        pass


_warm_up()

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

CLONE = {
    "user": 0x10000000,
    "mnt": 0x00020000,
    "net": 0x40000000,
    "ipc": 0x08000000,
    "uts": 0x04000000,
    "cgroup": 0x02000000,
    "pid": 0x20000000,
}
NS_ORDER = ["user", "mnt", "net", "ipc", "uts", "cgroup", "pid"]


def _check(r, what):
    if r == -1:
        e = ctypes.get_errno()
        raise OSError(e, what + ": " + os.strerror(e))
    return r


def _setns(fd, kind):
    if hasattr(os, "setns"):
        os.setns(fd, CLONE[kind])
    else:
        _check(_libc.setns(fd, CLONE[kind]), "setns " + kind)


def _prctl(op, a=0, b=0, c=0, d=0):
    return _libc.prctl(op, a, b, c, d)


def _sys(nr, *args):
    return _libc.syscall(ctypes.c_long(nr), *args)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _landlock(ll):
    # The same policy as nsinit's landlock.go: "/" read and exec, the writable trees every
    # handled right, symlinks never followed.
    if not ll or not ll.get("handled"):
        return
    handled = ll["handled"]
    attr = _RulesetAttr(handled, 0, ll.get("scoped", 0))
    rfd = _check(_sys(444, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0)), "landlock_create_ruleset")
    try:

        def add(path, access):
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
            except FileNotFoundError:
                return
            try:
                import stat

                st = os.fstat(pfd)
                if stat.S_ISLNK(st.st_mode):
                    return
                if not stat.S_ISDIR(st.st_mode):
                    access &= ll["file_access"]
                rule = _PathBeneath(access & handled, pfd)
                _check(_sys(445, ctypes.c_int(rfd), ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0)), "landlock_add_rule " + path)
            finally:
                os.close(pfd)

        add("/", ll["read"])
        for w in ll.get("writable") or []:
            add(w, handled)
        _check(_sys(446, ctypes.c_int(rfd), ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(rfd)


def _clear_caps():
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.capset(hdr, data), "capset")


def _harden(h):
    # nsinit's hardening.apply, step by step, in its order.
    for res, v in h["rlimits"]:
        resource.setrlimit(res, (v, v))
    _check(_prctl(28, h["securebits"]), "securebits")  # PR_SET_SECUREBITS
    for c in range(h["last_cap"] + 1):
        if _prctl(24, c) == -1 and ctypes.get_errno() != 22:  # PR_CAPBSET_DROP; EINVAL: unknown
            _check(-1, "drop bounding capability %d" % c)
    _check(_prctl(47, 4), "clear ambient capabilities")  # PR_CAP_AMBIENT, CLEAR_ALL
    _check(_prctl(38, 1), "no_new_privs")  # PR_SET_NO_NEW_PRIVS
    _landlock(h.get("landlock"))
    _clear_caps()
    prog = base64.b64decode(h["seccomp"])
    buf = ctypes.create_string_buffer(prog, len(prog))
    fp = _Fprog(len(prog) // 8, ctypes.addressof(buf))
    _check(_sys(317, ctypes.c_long(1), ctypes.c_long(0), ctypes.byref(fp)), "seccomp")  # SECCOMP_SET_MODE_FILTER


def _say(msg):
    try:
        os.write(2, ("lbb zygote: " + msg + "\n").encode())
    except OSError:
        pass


def _interpreter(req, ctl):
    # G: pid namespace, cgroups and credentials are the sandbox's from birth.
    os.setpgid(0, 0)
    # The uid change in C made it non-dumpable; an interpreter the agent starts is dumpable.
    _prctl(4, 1)  # PR_SET_DUMPABLE
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + 2
    while True:
        try:
            s.connect("\0" + req["socket"])
            break
        except (ConnectionRefusedError, FileNotFoundError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)
    reqR, reqW = os.pipe()
    resR, resW = os.pipe()
    outR, outW = os.pipe()
    errR, errW = os.pipe()
    socket.send_fds(s, [json.dumps({"pid": os.getpid()}).encode()], [reqW, resR, outR, errR, ctl.fileno()])
    buf = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        buf += b
    s.close()
    ctl.close()
    for fd in (reqW, resR, outR, errR):
        os.close(fd)
    setup = json.loads(buf)  # the agent's answer: the environment and cwd of its interpreters
    null = os.open("/dev/null", os.O_RDWR)
    high = [os.dup(fd) for fd in (null, outW, errW, reqR, resW)]
    for i, fd in enumerate(high):
        os.dup2(fd, i)
    os.closerange(5, 1 << 20)
    _harden(req["harden"])
    os.environ.clear()
    os.environ.update(setup.get("env") or {})
    os.chdir(setup.get("cwd") or "/")
    # Fresh PRNG state (the harness reseeds again at the claim); str hashes keep Z's seed.
    _h["_lbb_reseed"]()
    tempfile._name_sequence = None
    sys.argv = ["-c", "--lbb-prestart"] + _IMPORTS
    _h["_lbb_exit"](_h["_lbb_main"]())


def _child(req, fds):
    # C.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _sock.close()
    names = req["fds"]
    # Every descriptor but 0-2 and the request's, by ranges (close_range): no listing.
    lo = 3
    for fd in sorted(set(fds)):
        if fd > lo:
            os.closerange(lo, fd)
        lo = max(lo, fd + 1)
    os.closerange(lo, 1 << 20)
    byname = {}
    for n, fd in zip(names, fds):
        if n == "cgroup.procs":
            os.write(fd, b"0")
            os.close(fd)
        else:
            byname[n] = fd
    _setns(byname["user"], "user")
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    for n in NS_ORDER[1:]:
        _setns(byname[n], n)
    for fd in byname.values():
        os.close(fd)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    gpid = os.fork()
    if gpid == 0:
        a.close()
        try:
            _interpreter(req, b)
        except BaseException as e:
            _say("interpreter: %r" % (e,))
        os._exit(1)
    b.close()
    _prctl(38, 1)
    _clear_caps()
    pidfd = os.pidfd_open(gpid)
    watch = [pidfd, a]
    while True:
        r, _, _ = select.select(watch, [], [])
        if a in r:
            try:
                data = a.recv(64)
            except OSError:
                data = b""
            if not data:
                watch = [pidfd]
            for sig in data:
                for kill in (os.killpg, os.kill):
                    try:
                        kill(gpid, sig)
                        break
                    except OSError:
                        pass
        if pidfd in r:
            _, status, ru = os.wait4(gpid, 0)
            line = {"status": status, "utime_us": int(ru.ru_utime * 1e6), "stime_us": int(ru.ru_stime * 1e6), "maxrss": ru.ru_maxrss}
            try:
                a.sendall(json.dumps(line).encode() + b"\n")
            except OSError:
                pass
            os._exit(0)


def _reap(*_):
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _serve(msg, fds):
    try:
        req = json.loads(msg)
        if len(fds) != len(req["fds"]):
            raise ValueError("got %d files, want %d" % (len(fds), len(req["fds"])))
        pid = os.fork()
    except BaseException as e:
        for fd in fds:
            os.close(fd)
        return {"error": "%r" % (e,)}
    if pid == 0:
        try:
            _child(req, fds)
        except BaseException as e:
            _say("spawn: %r" % (e,))
        os._exit(1)
    for fd in fds:
        os.close(fd)
    return {"id": req.get("id"), "pid": pid}


_sock = socket.socket(fileno=3)
try:
    sys.stdout.flush()
    sys.stderr.flush()
except Exception:
    pass
gc.freeze()
signal.signal(signal.SIGCHLD, _reap)
os.write(1, b"ready\n")
while True:
    try:
        _msg, _fds, _flags, _ = socket.recv_fds(_sock, 1 << 20, 256)
    except InterruptedError:
        continue
    if not _msg:
        sys.exit(0)  # the server closed its end
    if _flags & socket.MSG_CTRUNC:
        for _fd in _fds:
            os.close(_fd)
        _sock.send(json.dumps({"error": "too many files"}).encode())
        continue
    _sock.send(json.dumps(_serve(_msg, _fds)).encode())
