# A process that keeps its state in memory only: a token drawn at its start and a counter it
# advances every 20 ms; it takes a note from /workspace/note.in and writes all of it, with its
# pid, to /workspace/state ("token count pid note"). The same token with a higher count is the
# same process carrying on; a new token is one started again, its memory lost.
import os, secrets, time
token, n, note = secrets.token_hex(8), 0, ""
while True:
    n += 1
    try:
        with open("/workspace/note.in") as f:
            note = f.read().strip()
        os.remove("/workspace/note.in")
    except FileNotFoundError:
        pass
    with open("/workspace/state.tmp", "w") as f:
        f.write("%s %d %d %s" % (token, n, os.getpid(), note))
    os.rename("/workspace/state.tmp", "/workspace/state")
    time.sleep(0.02)
