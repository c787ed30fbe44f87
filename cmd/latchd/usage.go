package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// flagGroup is one section of --help: a title and the flags it defines, in
// the order they are defined.
type flagGroup struct {
	title string
	fs    *flag.FlagSet
	names []string
}

func (g *flagGroup) strFlag(p *string, name, value, usage string) {
	g.fs.StringVar(p, name, value, usage)
	g.names = append(g.names, name)
}

func (g *flagGroup) intFlag(p *int, name string, value int, usage string) {
	g.fs.IntVar(p, name, value, usage)
	g.names = append(g.names, name)
}

func (g *flagGroup) boolFlag(p *bool, name string, value bool, usage string) {
	g.fs.BoolVar(p, name, value, usage)
	g.names = append(g.names, name)
}

func (g *flagGroup) floatFlag(p *float64, name string, value float64, usage string) {
	g.fs.Float64Var(p, name, value, usage)
	g.names = append(g.names, name)
}

func (g *flagGroup) durFlag(p *time.Duration, name string, value time.Duration, usage string) {
	g.fs.DurationVar(p, name, value, usage)
	g.names = append(g.names, name)
}

const usageHead = `Usage: latchd [flags]

latchd serves locks and semaphores over TCP (--port) and, with --http-port,
over REST. Every flag can be set instead by the environment variable shown
beside it, in brackets: the command line wins, then LATCHD_*, then the
DFLOCKD_* variables dflockd reads (docs/configuration.md). A flag takes its
value as --flag value or --flag=value; a boolean as --flag or --flag=false.
`

// printUsage writes --help: the flags section by section, each written
// --flag as the docs write it, with its variable and its default.
func printUsage(w io.Writer, groups []*flagGroup) {
	var b strings.Builder
	b.WriteString(usageHead)
	for _, g := range groups {
		fmt.Fprintf(&b, "\n%s:\n", g.title)
		for _, name := range g.names {
			writeFlagUsage(&b, g.fs.Lookup(name))
		}
	}
	_, _ = io.WriteString(w, b.String()) // nowhere to report a failed write of the help text
}

// writeFlagUsage writes one flag: "  --name type  [LATCHD_NAME]", then its
// help and default indented below.
func writeFlagUsage(b *strings.Builder, f *flag.Flag) {
	typ, usage := flag.UnquoteUsage(f)
	fmt.Fprintf(b, "  --%s", f.Name)
	if typ != "" {
		fmt.Fprintf(b, " %s", typ)
	}
	if def := shownDefault(f); def != "" {
		usage += " (default " + def + ")"
	}
	fmt.Fprintf(b, "  [%s]\n", envName(f.Name))
	for _, line := range wrap(usage, usageWidth-8) {
		fmt.Fprintf(b, "        %s\n", line)
	}
}

// usageWidth is the column --help wraps its text at.
const usageWidth = 80

// wrap breaks s into lines of at most width columns, at spaces (a longer
// word gets a line of its own).
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// shownDefault is the default --help prints, or "" for a zero value that
// the help text already explains.
func shownDefault(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return ""
	}
	if _, ok := f.Value.(flag.Getter).Get().(string); ok {
		return fmt.Sprintf("%q", f.DefValue)
	}
	return f.DefValue
}
