# lbb run() harness for Python, run as `python3 -c` by the guest agent.
# fd 3: the request JSON {"code", "input", "config"}; fd 4: the status line, then the result.
# User prints go to stdout untouched; a traceback goes to stderr.
# Pre-started (`python3 -c HARNESS --lbb-prestart MODULE…`): import the modules, write
# "ready\n" on fd 4, then wait for the request, which also carries "cwd" and "env".
import sys, os


def _lbb_prestart(mods):
    import importlib, random  # random: so that reseeding at the claim imports nothing

    for m in mods:
        try:
            importlib.import_module(m)
        except BaseException:
            pass  # the run that imports it sees the error itself
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    importlib.invalidate_caches()  # its first call imports importlib.metadata: not at the claim
    import gc

    gc.freeze()  # what is loaded now is never garbage: collections skip it
    # Nothing is written between this line and reading the request: what the agent finds in
    # stdout and stderr at the claim is from before it, and is dropped.
    os.write(4, b"ready\n")


def _lbb_reseed():
    # Everything seeded before the claim is seeded again, from the kernel's CSPRNG (which the
    # host fed fresh entropy at the claim). str/bytes hashing (PYTHONHASHSEED) cannot be.
    import random

    random.seed(os.urandom(32))
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed(np.frombuffer(os.urandom(32), dtype=np.uint32))
        except Exception:
            pass


def _lbb_main():
    import json

    warm = sys.argv[1:2] == ["--lbb-prestart"]
    if warm:
        _lbb_prestart(sys.argv[2:])
        del sys.argv[1:]
    with os.fdopen(3, "rb") as f:
        req = json.loads(f.read())
    if warm:
        _lbb_reseed()
        if req.get("env"):
            os.environ.update(req["env"])
        if req.get("cwd"):
            os.chdir(req["cwd"])
        # Files may have been written since the imports listed the directories on sys.path
        # (cheap here: the prestart paid for the first call).
        import importlib

        importlib.invalidate_caches()
    os.set_inheritable(4, False)  # processes that the code starts do not get the result fd
    out = os.fdopen(4, "wb")
    try:
        sys.stdout.reconfigure(line_buffering=True)
    except Exception:
        pass

    def finish(ok, error=None, result=b"", code=0):
        # The status line says the exit code too: once fd 4, stdout and stderr are closed
        # (the last thing _lbb_exit does), the agent reports the run without waiting for the
        # process to finish dying, which takes milliseconds with numpy and pandas mapped.
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        code &= 0xFF  # as the kernel reports it
        head = {"ok": True, "exit": code} if ok else {"ok": False, "error": error, "exit": code}
        out.write(json.dumps(head).encode() + b"\n" + result)
        out.flush()
        return code

    def exc_line(e):
        s = str(e)
        return type(e).__name__ + (": " + s if s else "")

    def report(e, tb):
        import traceback

        # Drop the harness's own frames (its file is "<string>") and asyncio.run's.
        aio = sys.modules.get("asyncio")
        aio = os.path.dirname(aio.__file__) + os.sep if aio is not None else None
        while tb is not None:
            f = tb.tb_frame.f_code.co_filename
            if f != "<string>" and not (aio and f.startswith(aio)):
                break
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb, file=sys.stderr)

    code = req.get("code") or ""
    inp = req.get("input")
    config = req.get("config")
    if config is None:
        config = {}

    import types, linecache

    filename = "<run>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    mod = types.ModuleType("__lbb__")
    mod.__file__ = filename
    sys.modules["__lbb__"] = mod
    try:
        exec(compile(code, filename, "exec"), mod.__dict__)
        run = mod.__dict__.get("run")
        if not callable(run):
            msg = (
                "the code defines no run(input, config) function: lbb calls run with the input and config "
                "and answers what it returns. Put the script in one:\n\n"
                "def run(input, config):\n    ...  # the script\n    return result\n"
            )
            print("lbb: " + msg, file=sys.stderr)
            return finish(False, msg, code=1)
        res = run(inp, config)
        if hasattr(res, "__await__"):
            import asyncio

            if not isinstance(res, types.CoroutineType):
                aw = res

                async def _await():
                    return await aw

                res = _await()
            res = asyncio.run(res)
    except SystemExit as e:
        report(e, e.__traceback__)
        return finish(False, "run exited: " + exc_line(e), code=e.code if isinstance(e.code, int) and e.code != 0 else 1)
    except BaseException as e:
        report(e, e.__traceback__)
        return finish(False, exc_line(e), code=1)

    try:
        data = _lbb_dumps(res)
    except _NotJSON as e:
        msg = "the result is not JSON: " + e.what + " at $" + "".join(reversed(e.path))
        print("lbb: " + msg, file=sys.stderr)
        return finish(False, msg, code=1)
    except BaseException as e:
        report(e, e.__traceback__)
        return finish(False, "converting the result: " + exc_line(e), code=1)
    return finish(True, result=data)


class _NotJSON(Exception):
    def __init__(self, what):
        self.what = what
        self.path = []


def _lbb_dumps(res):
    import json

    kw = {"allow_nan": False, "separators": (",", ":")}
    try:
        # Plain JSON values go through the C encoder as they are.
        s = json.dumps(res, ensure_ascii=False, **kw)
    except (TypeError, ValueError):
        res = _conv(res)
        s = json.dumps(res, ensure_ascii=False, **kw)
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: let JSON escape them
        return json.dumps(res, ensure_ascii=True, **kw).encode()


# The conversion of results json.dumps cannot take as they are (numpy and pandas values,
# dates, sets, dataclasses…) is compiled only when a run returns one: it is a third of this
# harness, and compiling it cost every interpreter's start 1–2 ms of CPU for nothing.
_CONV = r'''
_INF = float("inf")


def _conv(o):
    t = type(o)
    if o is None or t is bool or t is int or t is str:
        return o
    if t is float:
        return o if (o == o and o != _INF and o != -_INF) else None
    if t is list or t is tuple:
        return _seq(o)
    if t is dict:
        return _map(o.items())
    return _other(o)


def _seq(items):
    out = []
    for i, v in enumerate(items):
        try:
            out.append(_conv(v))
        except _NotJSON as e:
            e.path.append("[%d]" % i)
            raise
    return out


def _map(items):
    out = {}
    for k, v in items:
        k = _key(k)
        try:
            out[k] = _conv(v)
        except _NotJSON as e:
            e.path.append("." + k if k.isidentifier() else "[%s]" % _dq(k))
            raise
    return out


def _dq(s):
    import json

    return json.dumps(s, ensure_ascii=False)


def _key(k):
    if isinstance(k, str):
        return str(k)
    if k is None:
        return "null"
    if k is True or k is False:
        return "true" if k else "false"
    v = _conv(k)
    if isinstance(v, str):
        return v
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return repr(v)
    raise _NotJSON("a key of type " + _tname(k))


def _tname(o):
    t = type(o)
    m = t.__module__
    return t.__qualname__ if m == "builtins" else m + "." + t.__qualname__


def _other(o):
    # Subclasses of the JSON types (IntEnum, np.float64, OrderedDict…).
    if isinstance(o, bool):
        return bool(o)
    if isinstance(o, int):
        return int(o)
    if isinstance(o, float):
        return _conv(float(o))
    if isinstance(o, str):
        return str(o)
    # numpy and pandas values can only be here if their module is loaded: never import them.
    mods = sys.modules
    pd = mods.get("pandas")
    if pd is not None:
        if isinstance(o, pd.DataFrame):
            return _seq(o.to_dict(orient="records"))
        if isinstance(o, pd.Series):
            return _map(o.items())
        if isinstance(o, pd.Index):
            return _seq(o.tolist())
        if o is pd.NaT or o is pd.NA:
            return None
        if isinstance(o, pd.Timestamp):
            return o.isoformat()
        if isinstance(o, pd.Timedelta):
            return o.total_seconds()
        if isinstance(o, pd.Period):
            return str(o)
    np = mods.get("numpy")
    if np is not None:
        if isinstance(o, np.ndarray):
            return _conv(o.tolist())
        if isinstance(o, np.datetime64):
            return None if np.isnat(o) else str(np.datetime_as_string(o))
        if isinstance(o, np.timedelta64):
            return None if np.isnat(o) else float(o / np.timedelta64(1, "s"))
        if isinstance(o, np.generic):
            v = o.item()
            if type(v) is type(o):
                raise _NotJSON("a value of type " + _tname(o))
            return _conv(v)
    import datetime

    if isinstance(o, (datetime.datetime, datetime.date, datetime.time)):
        return o.isoformat()
    if isinstance(o, datetime.timedelta):
        return o.total_seconds()
    if isinstance(o, (set, frozenset)):
        return _seq(o)
    if isinstance(o, (list, tuple)):
        return _seq(o)
    if isinstance(o, dict):
        return _map(o.items())
    dc = mods.get("dataclasses")
    if dc is not None and dc.is_dataclass(o) and not isinstance(o, type):
        return _conv(dc.asdict(o))
    raise _NotJSON("a value of type " + _tname(o))
'''


def _conv(o):
    g = globals()
    if "_other" not in g:
        exec(compile(_CONV, "<string>", "exec"), g)  # defines the real _conv over this one
    return g["_conv"](o)


def _lbb_flush_files(gc):
    import io

    # Text before bytes: a file in a reference cycle can lose what its text layer holds when
    # the collector closes the layer below first.
    objs = gc.get_objects()  # without what a pre-started interpreter froze
    for kind in (io.TextIOBase, io.IOBase):
        for o in objs:
            if isinstance(o, kind) and o is not sys.stdout and o is not sys.stderr:
                try:
                    if not o.closed:
                        o.flush()
                except BaseException:
                    pass


def _lbb_exit(code):
    # What interpreter exit does for a run, in its order, without tearing down every module
    # (which takes over 100 ms once pandas is loaded): wait for the run's non-daemon threads,
    # run atexit handlers, drop the run's module so that files it left open are flushed and
    # closed (a collection is cheap: a pre-started interpreter froze what it imported), and
    # flush stdout and stderr.
    try:
        th = sys.modules.get("threading")
        if th is not None:
            th._shutdown()
    except BaseException:
        pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    try:
        import gc

        _lbb_flush_files(gc)
        mod = sys.modules.pop("__lbb__", None)
        if mod is not None:
            mod.__dict__.clear()
        del mod
        gc.collect()
    except BaseException:
        pass
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    # Done: every output closed tells the agent so (unless a child of the run holds one).
    for fd in (1, 2, 4):
        try:
            os.close(fd)
        except OSError:
            pass
    os._exit(code if isinstance(code, int) else 1)


# The host's zygote (internal/runtime/ns/zygote) loads this source under another name and
# calls _lbb_main itself in each interpreter it forks.
if __name__ == "__main__":
    _lbb_exit(_lbb_main())
