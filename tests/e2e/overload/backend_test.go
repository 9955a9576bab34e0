package overload

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPoolBackend: a pool of 2 workers holding each request 100 ms serves
// 6 requests sent at once in three waves: capacity = workers ÷ hold, the
// rest queued, whatever the CPU.
func TestPoolBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, w, _ := os.Pipe()
	stdout := os.Stdout
	os.Stdout = w
	errc := make(chan error, 1)
	go func() {
		errc <- RunBackend(ctx, BackendConfig{Addr: "127.0.0.1", Port: port, Sleep: 100 * time.Millisecond, Workers: 2})
	}()
	line, err := bufio.NewReader(r).ReadString('\n')
	os.Stdout = stdout
	if err != nil || !strings.Contains(line, "workers=2") {
		t.Fatalf("ready line %q (%v), want workers=2", line, err)
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/"
	var wg sync.WaitGroup
	lat := make([]time.Duration, 6)
	for i := range lat {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			resp, err := http.Get(url)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			lat[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	// Lower bounds only (a busy machine makes everything slower, never
	// faster): without the pool all six would take 100 ms.
	slices.Sort(lat)
	for i, l := range lat {
		if floor := time.Duration(i/2+1) * 95 * time.Millisecond; l < floor {
			t.Errorf("latencies %v: request %d took %v, want ≥ %v (two workers: waves of two)", lat, i, l, floor)
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
