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
// machine's busy time and queuebench's own, so a row can say how many
// cores each used: the machine's minus queuebench's went to the server
// under test and to whatever else ran.
type cpuSample struct {
	at         time.Time
	busy, self int64
	ok         bool
}

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
	b, err = os.ReadFile("/proc/self/stat")
	if err != nil {
		return s
	}
	// The fields after the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return s
	}
	f = strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return s
	}
	for _, v := range f[11:13] { // utime, stime (fields 14 and 15)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s
		}
		s.self += n
	}
	s.ok = true
	return s
}

// cpuUse is the CPU, in cores, used between two samples.
type cpuUse struct {
	self, machine float64
	ok            bool
}

func (a cpuSample) until(b cpuSample) cpuUse {
	secs := b.at.Sub(a.at).Seconds()
	if !a.ok || !b.ok || secs <= 0 {
		return cpuUse{}
	}
	c := func(ticks int64) float64 { return float64(ticks) / clockTicks / secs }
	return cpuUse{self: c(b.self - a.self), machine: c(b.busy - a.busy), ok: true}
}

// String formats the use as "bench/machine" cores.
func (u cpuUse) String() string {
	if !u.ok {
		return "-"
	}
	return fmt.Sprintf("%.2f/%.2f", u.self, u.machine)
}
