package testutil

import (
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// HAProxyServers asks HAProxy's stats socket (a unix socket at admin or
// operator level) for `show stat` and returns the servers of backend
// proxy, by name, each a map from the CSV's column names ("status",
// "weight", "stot", "hrsp_2xx", ...) to its values; a column a row lacks
// is absent from its map. The backend's own BACKEND line is left out.
// It gives up after 1 s to connect and 2 s in all.
func HAProxyServers(socket, proxy string) (map[string]map[string]string, error) {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "show stat\n"); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return nil, err
	}
	text := strings.TrimPrefix(strings.TrimSpace(string(b)), "# ")
	r := csv.NewReader(strings.NewReader(text))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil || len(rows) < 2 {
		return nil, fmt.Errorf("show stat: %q: %w", text, err)
	}
	out := map[string]map[string]string{}
	for _, row := range rows[1:] {
		sv := map[string]string{}
		for i, v := range row {
			if i < len(rows[0]) {
				sv[rows[0][i]] = v
			}
		}
		if sv["pxname"] != proxy || sv["svname"] == "BACKEND" {
			continue
		}
		out[sv["svname"]] = sv
	}
	return out, nil
}
