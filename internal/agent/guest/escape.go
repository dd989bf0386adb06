package guest

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// A process that leaves its command's process group (setsid, a daemonizing double fork) is
// reparented to the agent and survives a kill of the group. When a command is killed (its
// timeout, or the host cancelling it), killGroupAndEscaped also ends such processes — but
// only when they can have come from that command alone: no other process of the table was
// running at any moment since it started. With concurrent commands the origin of an orphan
// is ambiguous, and only the group is killed; what escaped stays inside the sandbox, under
// its limits, and ends with it.
//
// A terminal's command (a process on a pty) leads a session of its own, and its shell runs
// each job in a process group of its own within that session (job control): killing the
// terminal kills its whole session, whatever else runs.
func (t *procTable) killGroupAndEscaped(p *proc) {
	since, ok := procStartTime(p.pid) // read before the kill: the leader still exists
	if p.pty != nil {
		killSession(p.pid)
	}
	p.signal(syscall.SIGKILL)
	if p.pty != nil {
		// What forked while the first pass killed: a job's new processes are in its group.
		for range 3 {
			if killSession(p.pid) == 0 {
				break
			}
		}
	}
	t.mu.Lock()
	sole := !p.othersAtStart && t.seq == p.seq && len(t.live) == 1
	t.mu.Unlock()
	if !sole || !ok {
		return
	}
	self := os.Getpid()
	ownGroup := syscall.Getpgrp()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	stats := map[int]procStat{}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if st, ok := readStat(pid); ok {
				stats[pid] = st
			}
		}
	}
	// Ours: started since p, and below the agent (outside a sandbox, where the agent is not
	// PID 1, /proc shows the host's processes too).
	ours := func(pid int) bool {
		for i := 0; i < 64 && pid > 1; i++ {
			st, ok := stats[pid]
			if !ok {
				return false
			}
			if st.ppid == self || st.ppid == p.pid {
				return true
			}
			pid = st.ppid
		}
		return false
	}
	for pid, st := range stats {
		if pid == self || pid == p.pid || st.start < since || !ours(pid) {
			continue
		}
		if st.pgrp > 1 && st.pgrp != ownGroup {
			syscall.Kill(-st.pgrp, syscall.SIGKILL)
		}
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// killSession kills every process of session sid but the agent, and their process groups;
// it answers how many it found.
func killSession(sid int) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self, ownGroup := os.Getpid(), syscall.Getpgrp()
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if st, ok := readStat(pid); ok && st.sid == sid {
			n++
			if st.pgrp > 1 && st.pgrp != ownGroup {
				syscall.Kill(-st.pgrp, syscall.SIGKILL)
			}
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return n
}

type procStat struct {
	ppid, pgrp, sid int
	start           uint64 // clock ticks after boot
}

func procStartTime(pid int) (uint64, bool) {
	st, ok := readStat(pid)
	return st.start, ok
}

// readStat parses /proc/<pid>/stat; comm may hold spaces and parentheses, so fields are
// counted from the last ')'.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, pgrp 5, session 6, starttime 22.
	if len(f) < 20 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	sid, err4 := strconv.Atoi(f[3])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return procStat{}, false
	}
	return procStat{ppid: ppid, pgrp: pgrp, sid: sid, start: start}, true
}
