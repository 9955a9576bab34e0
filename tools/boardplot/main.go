// Command boardplot draws olcd's Grafana board (deploy/grafana/olcd.json)
// from a Prometheus that scraped olcd, without Grafana: every panel's
// queries run over the range and are drawn in the board's grid
// (tools/board). The README's docs/img/board.png comes from `make
// docs-board`, which runs an overload with Prometheus scraping olcd and
// calls the same code; this command draws again from that run's Prometheus
// (docs/development.md, "The board's picture"), or from any other:
//
//	boardplot -prometheus http://127.0.0.1:9090 -from 2026-12-06T01:10:00Z -to 2026-12-06T01:13:00Z -out board.png
//	boardplot -prometheus http://127.0.0.1:9090 -last 15m -var instance=node-1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/olcd/olcd/tools/board"
)

// vars is a repeatable -var name=regex flag.
type vars map[string]string

func (v vars) String() string { return fmt.Sprint(map[string]string(v)) }

func (v vars) Set(s string) error {
	k, val, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("-var %q: want name=value", s)
	}
	v[strings.TrimPrefix(k, "$")] = val
	return nil
}

func run() error {
	boardPath := flag.String("board", "deploy/grafana/olcd.json", "the Grafana board")
	prom := flag.String("prometheus", "http://127.0.0.1:9090", "Prometheus's address")
	from := flag.String("from", "", "start of the range (RFC 3339)")
	to := flag.String("to", "", "end of the range (RFC 3339; default now)")
	last := flag.Duration("last", 0, "the range is the last this long (instead of -from)")
	scrape := flag.Duration("scrape", 15*time.Second, "the scrape interval of olcd's job: $__interval and $__rate_interval derive from it")
	out := flag.String("out", "board.png", "PNG to write")
	width := flag.Int("width", board.DefaultStyle.Width, "the picture's width in pixels")
	strict := flag.Bool("strict", false, "fail when a query returns no series")
	vs := vars{"instance": ".+", "job": ".+"}
	flag.Var(vs, "var", "a board variable, name=regex (repeatable; default instance=.+ and job=.+, Grafana's All)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only; -h lists them)", flag.Arg(0))
	}
	end := time.Now()
	var start time.Time
	var err error
	if *to != "" {
		if end, err = time.Parse(time.RFC3339, *to); err != nil {
			return fmt.Errorf("-to: %w", err)
		}
	}
	switch {
	case *last > 0 && *from != "":
		return errors.New("-from and -last: give one")
	case *last > 0:
		start = end.Add(-*last)
	case *from != "":
		if start, err = time.Parse(time.RFC3339, *from); err != nil {
			return fmt.Errorf("-from: %w", err)
		}
	default:
		return errors.New("no range: give -from (and -to) or -last")
	}
	d, err := board.Load(*boardPath)
	if err != nil {
		return err
	}
	c, err := api.NewClient(api.Config{Address: *prom})
	if err != nil {
		return fmt.Errorf("-prometheus %s: %w", *prom, err)
	}
	style := board.DefaultStyle
	style.Width = *width
	n, err := board.Render(context.Background(), v1.NewAPI(c), d, board.Range{From: start, To: end, Scrape: *scrape, Points: style.Width / 2, Vars: vs}, style, *out, os.Stderr)
	if err != nil {
		return err
	}
	if *strict && n > 0 {
		return fmt.Errorf("%d queries returned no series (listed above); %s drawn with them empty", n, *out)
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "boardplot:", err)
		os.Exit(1)
	}
}
