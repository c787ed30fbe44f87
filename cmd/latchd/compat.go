package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// A dflockd v1.10 command line or environment starts latchd
// (docs/compat.md). Each flag's value comes from the command line, else
// LATCHD_<FLAG>, else dflockd's name for it (dflockdEnv), else
// DFLOCKD_<FLAG>, else the default.

// source is where a flag's value came from; a larger one wins.
type source uint8

const (
	fromDefault source = iota
	fromDflockdEnv
	fromLatchdEnv
	fromFlag
)

// dflockdEnv names the variables dflockd v1.10 reads under a name other
// than DFLOCKD_<FLAG>.
var dflockdEnv = map[string]string{
	"default-lease-ttl":    "DFLOCKD_DEFAULT_LEASE_TTL_S",
	"lease-sweep-interval": "DFLOCKD_LEASE_SWEEP_INTERVAL_S",
	"gc-interval":          "DFLOCKD_GC_LOOP_SLEEP",
	"gc-max-idle":          "DFLOCKD_GC_MAX_UNUSED_TIME",
	"read-timeout":         "DFLOCKD_READ_TIMEOUT_S",
	"write-timeout":        "DFLOCKD_WRITE_TIMEOUT_S",
	"shutdown-timeout":     "DFLOCKD_SHUTDOWN_TIMEOUT_S",
}

// envNames returns the variables of a flag, strongest first. --version
// has no DFLOCKD_* fallback: DFLOCKD_VERSION=1.10 in an image's
// environment must not make latchd print its version and exit.
func envNames(flagName string) []string {
	names := []string{envName(flagName)}
	if flagName == "version" {
		return names
	}
	if alias, ok := dflockdEnv[flagName]; ok {
		names = append(names, alias)
	}
	return append(names, "DFLOCKD_"+strings.TrimPrefix(names[0], "LATCHD_"))
}

// applyEnv fills every flag not given on the command line from the first
// of its variables that is set. It returns where each flag's value came
// from and, for those set from the environment, the variable's name.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) (map[string]source, map[string]string, error) {
	src, vars := map[string]source{}, map[string]string{}
	fs.Visit(func(f *flag.Flag) { src[f.Name] = fromFlag })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if src[f.Name] == fromFlag {
			return
		}
		for _, name := range envNames(f.Name) {
			v := getenv(name)
			if v == "" {
				continue
			}
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				v = boolWord(v)
			}
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %v", name, v, err))
			}
			src[f.Name], vars[f.Name] = fromDflockdEnv, name
			if strings.HasPrefix(name, "LATCHD_") {
				src[f.Name] = fromLatchdEnv
			}
			return
		}
	})
	return src, vars, errors.Join(errs...)
}

// boolWord maps the yes/no spellings dflockd accepts in its environment
// onto strconv.ParseBool's; anything else is left for it to judge.
func boolWord(v string) string {
	switch strings.ToLower(v) {
	case "yes", "on":
		return "true"
	case "no", "off":
		return "false"
	}
	return v
}

// addDflockdFlags defines the dflockd v1.10 flags latchd has none of its
// own for, and the flags latchd retired, so that old configurations start.
func (o *options) addDflockdFlags(g *flagGroup) {
	g.boolFlag(&o.debug, "debug", false, "same as --log-level debug (dflockd's flag)")
	g.intFlag(&o.leaseSweepInterval, "lease-sweep-interval", 1,
		"no effect, accepted for dflockd: leases expire at their deadline, there is no sweep")
	g.intFlag(&o.gcInterval, "gc-interval", 5,
		"no effect, accepted for dflockd: an idle key is pruned at its --gc-max-idle deadline, there is no GC pass")
	g.boolFlag(&o.loopRawWait, "loop-raw-wait", true,
		"no effect: accepted and ignored; kept so old configurations start")
}

// retired are the flags accepted with no effect, and why; setting one
// logs a warning.
var retired = [...]struct{ name, why string }{
	{"lease-sweep-interval", "latchd expires each lease at its own deadline (within ~10 ms); there is no sweep to pace"},
	{"gc-interval", "latchd prunes each idle key when its --gc-max-idle runs out; there is no periodic GC pass"},
	{"loop-raw-wait", "latchd's event loops wait in the Go runtime's network poller; the flag is retired"},
}

// applyDflockdFlags turns the dflockd flags into latchd settings and
// warnings, once the sources are known.
func (o *options) applyDflockdFlags(src map[string]source) {
	if o.debug {
		o.logLevel = "debug"
	}
	for _, f := range retired {
		if src[f.name] != fromDefault {
			o.warnings = append(o.warnings, warning{flag: f.name, why: f.why})
		}
	}
}

// warning is a flag accepted for compatibility that has no effect.
type warning struct{ flag, why string }

// resolveAuthToken picks the auth secret from --auth-token and
// --auth-token-file: the one from the stronger source wins; from the same
// source, the inline token, as in dflockd. An empty value counts as unset.
func (o *options) resolveAuthToken(src map[string]source) error {
	tokSrc, fileSrc := src["auth-token"], src["auth-token-file"]
	if o.authToken == "" {
		tokSrc = fromDefault
	}
	if o.authTokenFile == "" {
		fileSrc = fromDefault
	}
	if fileSrc <= tokSrc {
		return nil
	}
	o.authFromFile = true
	return readSecret(&o.authToken, o.authTokenFile, "auth token")
}
