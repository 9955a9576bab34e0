// Command olcd-idleconns measures what idle keep-alive connections cost a
// server, for the reaper decision of issue 26 (docs/datapath.md, "The
// request gate"): for each count of idle connections it starts the
// overload harness's CPU backend (olcd-overload backend, keep-alive on,
// GOMAXPROCS 1) on loopback, opens that many connections, each answered
// once and then left idle, and reads the backend's CPU time and resident
// memory over an idle window; then it serves a fixed rate on a separate
// pool of keep-alive connections beside the idle ones and reports the
// latency and the backend's CPU per request.
//
//	olcd-idleconns [-backend bin/olcd-overload] [-conns 0,2000,8000] [-rate 100] [-idle 10s] [-load 10s]
//
// Every load is bounded: -rate × -load requests at most, each with a 2 s
// timeout.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const addr = "127.0.0.1:18099"

func main() {
	backend := flag.String("backend", "bin/olcd-overload", "the overload harness binary (its backend command)")
	conns := flag.String("conns", "0,2000,8000", "idle connection counts, comma-separated")
	rate := flag.Float64("rate", 100, "requests per second of the load beside the idle connections")
	idle := flag.Duration("idle", 10*time.Second, "idle window over which the backend's CPU is read")
	load := flag.Duration("load", 10*time.Second, "length of the load")
	flag.Parse()
	if err := raiseNoFile(); err != nil {
		fmt.Fprintln(os.Stderr, "olcd-idleconns:", err)
		os.Exit(1)
	}
	fmt.Println("idle  backend CPU idle  RSS MiB  load/s  p50 ms  p99 ms  CPU ms/request")
	for _, f := range strings.Split(*conns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "olcd-idleconns: -conns: %q is not a count\n", f)
			os.Exit(2)
		}
		if err := measure(*backend, n, *rate, *idle, *load); err != nil {
			fmt.Fprintln(os.Stderr, "olcd-idleconns:", err)
			os.Exit(1)
		}
	}
}

// raiseNoFile lifts the soft open-file limit to the hard one: the idle
// connections' sockets are on both ends in this process and the backend.
func raiseNoFile() error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	l.Cur = l.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}

func measure(backend string, n int, rate float64, idle, load time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, backend, "backend", "-addr", "127.0.0.1", "-port", strings.TrimPrefix(addr, "127.0.0.1:"),
		"-work", "5ms", "-keepalive=true")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil { // "ready ..."
		return fmt.Errorf("backend not ready: %w", err)
	}
	pid := cmd.Process.Pid

	held := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range n {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return fmt.Errorf("idle connection %d: %w", len(held), err)
		}
		held = append(held, c)
		if err := once(c); err != nil {
			return fmt.Errorf("idle connection %d: %w", len(held), err)
		}
	}
	cpu0 := cpuTime(pid)
	time.Sleep(idle) // the measurement window: nothing is sent
	idleCPU := (cpuTime(pid) - cpu0).Seconds() / idle.Seconds()
	rss := rssMiB(pid)

	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	every := time.Duration(float64(time.Second) / rate)
	cpu1 := cpuTime(pid)
	start := time.Now()
	sent := 0
	for due := time.Duration(0); due < load; due += every {
		time.Sleep(time.Until(start.Add(due)))
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			resp, err := client.Get("http://" + addr + "/")
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			lat = append(lat, time.Since(t0))
			mu.Unlock()
		}()
	}
	wg.Wait()
	loadCPU := cpuTime(pid) - cpu1
	if len(lat) == 0 {
		return errors.New("no request of the load was answered")
	}
	slices.Sort(lat)
	q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))].Microseconds()) / 1000 }
	fmt.Printf("%5d  %16.4f  %7.1f  %6.0f  %6.1f  %6.1f  %14.2f   (%d of %d answered)\n", n, idleCPU, rss,
		float64(len(lat))/load.Seconds(), q(0.5), q(0.99), float64(loadCPU.Microseconds())/1000/float64(len(lat)), len(lat), sent)
	return nil
}

// once sends one GET on c and reads its whole answer (the backend's is
// short and has a Content-Length).
func once(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: idle\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
}

// cpuTime is pid's user + system CPU time (/proc/<pid>/stat, clock ticks
// of 10 ms).
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// rssMiB is pid's resident memory (VmRSS) in MiB.
func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
