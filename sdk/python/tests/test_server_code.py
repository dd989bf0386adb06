"""The code interpreter against a real `lbb serve`: seed 003's recipe (a plain snippet in one
call, sync and async), and a context's cells with state, a figure and streamed output."""

from __future__ import annotations

import asyncio
import base64

from conftest import Server
from lbb import AsyncLbbClient, LbbClient

FACTORIAL = "import math\nprint(math.factorial(20))"


def test_run_code_seed003(lbb: LbbClient) -> None:
    r = lbb.sandboxes.run_code(FACTORIAL, language="python", timeout_ms=30000, idempotency_key="py-seed003")
    assert (r.exit_code, r.stdout.text, r.stderr.text) == (0, "2432902008176640000\n", "")
    assert r.duration_ms >= 0
    again = lbb.sandboxes.run_code(FACTORIAL, language="python", timeout_ms=30000, idempotency_key="py-seed003")
    assert again.command == r.command
    bad = lbb.sandboxes.run_code("import sys\nsys.exit('no')")
    assert (bad.ok, bad.exit_code, bad.stderr.text) == (False, 1, "no\n")


def test_run_code_async(server: Server) -> None:
    async def main() -> None:
        async with AsyncLbbClient(server.url, api_key=server.key, graph="main") as c:
            r = await c.sandboxes.run_code(FACTORIAL)
            assert r.exit_code == 0 and r.stdout.text == "2432902008176640000\n"

    asyncio.run(main())


def test_code_contexts(lbb: LbbClient) -> None:
    with lbb.sandboxes.create(expires_in_seconds=600) as sb:
        sb.code.run("import matplotlib.pyplot as plt\nx = 20")
        out: list = []
        results: list = []
        r = sb.code.run("print('hi')\nx * 2 + 2", on_stdout=out.append, on_result=results.append)
        assert (r.text, out, results[0]["data"]["text/plain"]) == ("42", ["hi\n"], "42")
        fig = sb.code.run("plt.figure(figsize=(2, 1), dpi=50)\nplt.plot([1, 2])")
        png = base64.b64decode(fig.results[-1]["data"]["image/png"])
        assert png.startswith(b"\x89PNG")
        e = sb.code.run("{}['missing']")
        assert e.error["name"] == "KeyError" and e.status == "failed"
        ctx = sb.code.contexts()[0]
        sb.code.restart_context(ctx["id"])
        assert sb.code.run("x", context=ctx["id"]).error["name"] == "NameError"
