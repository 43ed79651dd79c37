package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// On a shared 2-core machine a figure is only as good as the CPU that
// others left it. cpuSample reads, from Linux's /proc in clock ticks, the
// machine's busy time, queuebench's own and the servers' (every process
// named in servers), so a row can say how many cores each used.
type cpuSample struct {
	at                 time.Time
	busy, self, server int64
	ok                 bool
}

// servers are the process names of the servers the anchors and jsqueue
// run on; their CPU is the "server" part of a row.
var servers = map[string]bool{"postgres": true, "redis-server": true, "nats-server": true}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return s
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s
		}
		switch i {
		case 3, 4: // idle, iowait
		case 8, 9: // guest time is already counted in user
		default:
			s.busy += n
		}
	}
	var ok bool
	if s.self, ok = processCPU("/proc/self/stat", nil); !ok {
		return s
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		if n, ok := processCPU("/proc/"+p.Name()+"/stat", servers); ok {
			s.server += n
		}
	}
	s.ok = true
	return s
}

// processCPU reads a process's user and system time from its stat file,
// if its command name is in names (or names is nil).
func processCPU(stat string, names map[string]bool) (int64, bool) {
	b, err := os.ReadFile(stat)
	if err != nil {
		return 0, false
	}
	// The command name is in parentheses; the fields follow it.
	open, i := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || i < open {
		return 0, false
	}
	if names != nil && !names[string(b[open+1:i])] {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	var sum int64
	for _, v := range f[11:13] { // utime, stime (fields 14 and 15)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		sum += n
	}
	return sum, true
}

// cpuUse is the CPU, in cores, used between two samples.
type cpuUse struct {
	self, server, machine float64
	ok                    bool
}

func (a cpuSample) until(b cpuSample) cpuUse {
	secs := b.at.Sub(a.at).Seconds()
	if !a.ok || !b.ok || secs <= 0 {
		return cpuUse{}
	}
	c := func(ticks int64) float64 { return float64(ticks) / clockTicks / secs }
	return cpuUse{self: c(b.self - a.self), server: c(b.server - a.server), machine: c(b.busy - a.busy), ok: true}
}

// String formats the use as "bench/server/machine" cores.
func (u cpuUse) String() string {
	if !u.ok {
		return "-"
	}
	return fmt.Sprintf("%.2f/%.2f/%.2f", u.self, u.server, u.machine)
}
