// Package rules is the only place that knows olcd's YAML configuration. It
// decodes one file strictly (an unknown key is an error), validates it in one
// pass that reports every problem with file:line and the field path, and
// hands the other packages plain typed values: olc's types, adaptive.Config
// for the controller, and the fields the daemon maps onto the sampler and
// the loader. docs/config.md documents every key and default.
package rules

import sy "github.com/olcd/olcd/internal/strictyaml"

// Problem is one thing wrong with a config document: File, Line (0 when
// unknown), the dotted Field path ("ports[2].port", "" for the document as
// a whole), Msg and Hint; String renders "file:line: field: msg (hint)".
type Problem = sy.Problem

// ValidationError lists every problem of a document, sorted by file and
// line (ProblemLines, one string each).
type ValidationError = sy.ValidationError

// Warning is a valid but surprising setting: the config loads, and the
// daemon logs the warning (e.g. everything in observe, enforce without any
// threshold). Line is 0 when the setting comes from a default; Hint is "".
type Warning = Problem
