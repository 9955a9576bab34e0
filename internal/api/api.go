// Package api is olcd's admin API as its clients see it: the JSON documents
// of the unix-socket HTTP API (GET /v1/status, the error body) and a Client
// for them. The daemon serves these types; `olcd status`, `olcd set`,
// `olcd record` and the end-to-end tests read them. It imports nothing of
// olcd's, so a client builds without the daemon.
package api

// DefaultSocket is where the daemon listens unless the config says
// otherwise: under /run (tmpfs, gone after reboot) in a 0700 directory.
const DefaultSocket = "/run/olcd/olcd.sock"

// Error is the JSON body of every non-2xx admin API answer.
type Error struct {
	// Error is the message in one line.
	Error string `json:"error"`
	// Problems lists every config problem, one per line with file:line and
	// field path, when the request carried or triggered an invalid config.
	Problems []string `json:"problems,omitempty"`
}
