"""The synchronous client is what scripts/unasync.py makes of the asyncio one."""

import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "unasync.py"


def test_sync_client_is_generated_from_the_async_one():
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
