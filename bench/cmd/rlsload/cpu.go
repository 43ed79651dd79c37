package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// On a shared 2-core machine a point is only as good as the CPU that others
// left it. cpuSample reads, from Linux's /proc in clock ticks, the machine's
// busy time, this process's time and the server's (if its pids are known), so
// that a run can say how many cores each used and how many went to others.
type cpuSample struct {
	busy, self, server int64
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

func sampleCPU(serverPIDs []int) (cpuSample, error) {
	var s cpuSample
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return s, errors.New("/proc/stat: no cpu line")
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s, fmt.Errorf("/proc/stat: %w", err)
		}
		switch i {
		case 3, 4: // idle, iowait
		case 8, 9: // guest time is already counted in user
		default:
			s.busy += n
		}
	}
	if s.self, err = procTicks("self"); err != nil {
		return s, err
	}
	for _, pid := range serverPIDs {
		t, err := procTicks(strconv.Itoa(pid))
		if err != nil {
			return s, err
		}
		s.server += t
	}
	return s, nil
}

// procTicks returns utime+stime of /proc/<pid>/stat.
func procTicks(pid string) (int64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%s/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	var t int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%s/stat: %w", pid, err)
		}
		t += n
	}
	return t, nil
}

// cores returns the CPU each part used between a and b, in cores, over secs
// seconds, formatted server/load/others ("-" for the server when its pid is
// unknown).
func cores(a, b cpuSample, serverKnown bool, secs float64) string {
	c := func(ticks int64) float64 { return float64(ticks) / clockTicks / secs }
	busy, self, srv := b.busy-a.busy, b.self-a.self, b.server-a.server
	if !serverKnown {
		return fmt.Sprintf("%4s/%.2f/%.2f", "-", c(self), c(busy-self))
	}
	return fmt.Sprintf("%.2f/%.2f/%.2f", c(srv), c(self), c(max(busy-self-srv, 0)))
}
