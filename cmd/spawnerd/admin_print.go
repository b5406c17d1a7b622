package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
)

// column is one column of a table: its header, its cell, and whether only
// -o wide shows it.
type column[T any] struct {
	header string
	cell   func(T) string
	wide   bool
}

// printTable prints rows as kubectl does: upper-case headers, columns
// aligned with spaces, "-" for an empty cell. With no rows it says so on
// the error stream instead, and prints nothing.
func printTable[T any](a *adminCmd, what string, cols []column[T], rows []T) error {
	if len(rows) == 0 {
		fmt.Fprintf(a.errOut, "No %s found.\n", what)
		return nil
	}
	tw := tabwriter.NewWriter(a.out, 0, 8, 3, ' ', 0)
	var head []string
	for _, c := range cols {
		if !c.wide || a.output == outputWide {
			head = append(head, c.header)
		}
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		var cells []string
		for _, c := range cols {
			if !c.wide || a.output == outputWide {
				cells = append(cells, cell(c.cell(r)))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// cell makes a value fit one table cell: "-" when empty, one line.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "-"
	}
	return s
}

// printJSON prints an API answer, indented.
func (a *adminCmd) printJSON(v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the answer: %w", err)
	}
	_, err = a.out.Write(append(data, '\n'))
	return err
}

// age is how long ago t was, as kubectl's AGE column says it (5m, 3h, 2d).
func (a *adminCmd) age(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return duration.HumanDuration(a.now().Sub(t))
}

// until is how long until t, "0s" once it passed.
func (a *adminCmd) until(t time.Time) string {
	return duration.HumanDuration(max(t.Sub(a.now()), 0))
}

// agePtr is age for an optional time.
func (a *adminCmd) agePtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return a.age(*t)
}

// when is a time for people: RFC 3339 in UTC and how long ago (or ahead).
func (a *adminCmd) when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	d := a.now().Sub(*t)
	if d < 0 {
		return fmt.Sprintf("%s (in %s)", t.UTC().Format(time.RFC3339), duration.HumanDuration(-d))
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), duration.HumanDuration(d))
}

// fields prints "Name:  value" lines aligned, as kubectl describe does.
type fields struct {
	tw *tabwriter.Writer
}

func newFields(w io.Writer) *fields { return &fields{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)} }

// add prints a line if value is not empty.
func (f *fields) add(name, value string) {
	if value != "" {
		f.keep(name, value)
	}
}

// keep prints a line, "-" for an empty value; a value of several lines
// becomes one.
func (f *fields) keep(name, value string) { fmt.Fprintf(f.tw, "%s:\t%s\n", name, cell(value)) }

func (f *fields) flush() error { return f.tw.Flush() }

func serverName(s string) string {
	if s == "" {
		return "(default)"
	}
	return s
}
