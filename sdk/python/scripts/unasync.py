#!/usr/bin/env python3
"""Writes the synchronous client, src/lbb/_client.py, from the asyncio one, _async_client.py.

The way httpcore keeps its two clients (its scripts/unasync.py): the async code is the source
and a fixed table of rewrites turns it into the sync code. `--check` writes nothing and fails
when the committed _client.py is not what the table makes of _async_client.py (a test runs it).

Lines ending in `# async only` are dropped from the sync file.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "src" / "lbb"
SOURCE = PACKAGE / "_async_client.py"
TARGET = PACKAGE / "_client.py"

HEADER = "# Generated from _async_client.py by scripts/unasync.py; do not edit.\n"

# In order; each is a regular expression and what it becomes.
RULES = [
    (r'\A"""The asyncio client, :class:`AsyncLbbClient`\..*?"""', '"""The synchronous client, :class:`LbbClient`."""'),
    (r'"""The asyncio client\.', '"""The synchronous client.'),
    (r"^\n(?=.*# async only\n\n)", ""),  # a dropped line between blank lines takes one with it
    (r"^.*# async only\n", ""),
    (r"\bawait asyncio\.to_thread\(([\w.]+), ", r"\1("),
    (r"\basyncio\.sleep\b", "time.sleep"),
    (r"\bawait ", ""),
    (r"\basync (def|with|for)\b", r"\1"),
    (r"\bAwaitable\[(\w+)\]", r"\1"),
    (r"(?<![A-Za-z0-9])Async(?=[A-Z])", ""),  # AsyncSandbox, _AsyncScoped, AsyncIterator, httpx.AsyncClient
    (r"\baclose\b", "close"),
    (r"\baread\b", "read"),
    (r"\baiter_lines\b", "iter_lines"),
    (r"\baiter_bytes\b", "iter_bytes"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\b__aiter__\b", "__iter__"),
    (r"\b__anext__\b", "__next__"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
]


def unasync(text: str) -> str:
    for pattern, repl in RULES:
        text = re.sub(pattern, repl, text, flags=re.MULTILINE | re.DOTALL if pattern.startswith(r"\A") else re.MULTILINE)
    return HEADER + text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when _client.py is not what this script writes")
    args = ap.parse_args()
    want = unasync(SOURCE.read_text(encoding="utf-8"))
    if args.check:
        if TARGET.read_text(encoding="utf-8") != want:
            print(f"{TARGET} differs from what scripts/unasync.py makes of {SOURCE.name}; run python3 scripts/unasync.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(want, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
