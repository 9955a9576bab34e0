// Package rules is the only place that knows olcd's YAML configuration. It
// decodes one file strictly (an unknown key is an error), validates it in one
// pass that reports every problem with file:line and the field path, and
// hands the other packages plain typed values: olc's types, adaptive.Config
// for the controller, and the fields the daemon maps onto the sampler and
// the loader. docs/config.md documents every key and default.
package rules

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a config document.
type Problem struct {
	// File is the document's source (a path, or a name such as "patch").
	File string
	// Line is the 1-based line of the offending node; 0 when unknown.
	Line int
	// Field is the dotted field path, e.g. "signals.cpu_busy.threshold" or
	// "ports[2].port"; "" for the document as a whole.
	Field string
	// Msg says what is wrong, in lowercase words.
	Msg string
	// Hint suggests a fix, e.g. `looks like percent; did you mean 0.8?`.
	Hint string
}

// String renders "file:line: field: msg (hint)".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	if p.Hint != "" {
		fmt.Fprintf(&b, " (%s)", p.Hint)
	}
	return b.String()
}

// ValidationError lists every problem of a document, in document order.
type ValidationError struct {
	// Problems holds at least one problem, sorted by file and line.
	Problems []Problem
}

// Error renders the problems one per line, the first preceded by their count.
func (e *ValidationError) Error() string {
	lines := e.ProblemLines()
	if len(lines) == 1 {
		return "invalid config: " + lines[0]
	}
	return fmt.Sprintf("invalid config, %d problems:\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// ProblemLines returns one "file:line: field: msg (hint)" line per problem
// (the admin API sends them as a list).
func (e *ValidationError) ProblemLines() []string {
	out := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p.String()
	}
	return out
}

// Warning is a valid but surprising setting: the config loads, and the
// daemon logs the warning (e.g. everything in observe, enforce without any
// threshold). Line is 0 when the setting comes from a default; Hint is "".
type Warning = Problem
