package load

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// machine is a reading of the machine's CPU: the time all its cores spent
// busy and in all, from /proc/stat, and this process's own CPU time.
type machine struct {
	busy, total time.Duration
	self        time.Duration
}

// clockTick is the unit of /proc/stat (USER_HZ).
const clockTick = 10 * time.Millisecond

func readMachine() (machine, error) {
	var m machine
	f, err := os.Open("/proc/stat")
	if err != nil {
		return m, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return m, fmt.Errorf("load: empty /proc/stat")
	}
	// cpu user nice system idle iowait irq softirq steal ...
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return m, fmt.Errorf("load: unreadable /proc/stat: %q", sc.Text())
	}
	for i, v := range fields[1:9] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return m, fmt.Errorf("load: unreadable /proc/stat: %w", err)
		}
		d := time.Duration(n) * clockTick
		m.total += d
		if i != 3 && i != 4 { // idle, iowait
			m.busy += d
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return m, err
	}
	m.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return m, nil
}

// loadAverage is the machine's 1-minute load average.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
