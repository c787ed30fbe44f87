package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"time"
)

// bound is the range a numeric flag accepts, checked before any package's
// Config sees the value, so that the error names the flag.
type bound struct{ min, max float64 }

const (
	maxSecs = math.MaxInt32 // seconds flags: ~68 years, what a duration holds with room to spare
	maxKiB  = 1 << 30       // 1 TiB, in KiB
	maxMiB  = 1 << 20       // 1 TiB, in MiB
)

var noMax = math.Inf(1)

// bounds holds every numeric flag's range; uncheckedFlags lists the
// numeric flags that accept any value (dflockd's, which have no effect).
var bounds = map[string]bound{
	"port":                        {0, 65535},
	"http-port":                   {0, 65535},
	"shutdown-timeout":            {0, maxSecs},
	"max-locks":                   {0, noMax},
	"max-waiters":                 {0, noMax},
	"max-keys-per-owner":          {0, math.MaxInt32},
	"max-connections":             {0, noMax},
	"max-connections-per-ip":      {0, noMax},
	"http-max-connections":        {0, noMax},
	"http-max-connections-per-ip": {0, noMax},
	"http-max-sessions":           {0, noMax},
	"http-max-sessions-per-ip":    {0, noMax},
	"http-rate-limit-per-ip":      {0, noMax},
	"read-timeout":                {1, maxSecs},
	"write-timeout":               {0, maxSecs},
	"max-output-mb":               {0, maxMiB},
	"max-conn-output-kb":          {64, maxKiB},
	"max-stats-kb":                {4, maxKiB},
	"default-lease-ttl":           {1, maxSecs},
	"gc-max-idle":                 {0, maxSecs},
	"http-session-ttl":            {1, maxSecs},
	"auth-failures-per-minute":    {0, noMax},
	"raft-batch-wait":             {0, float64(100 * time.Millisecond)},
	"learner-promote-lag":         {0, noMax},
	"orphan-ttl":                  {0, float64(time.Hour)},
	"lock-delay":                  {0, float64(maxSecs * time.Second)},
	"event-loops":                 {0, 1 << 16},
	"shards":                      {1, 1 << 16},
	"send-buffer-kb":              {0, maxKiB},
}

var uncheckedFlags = map[string]bool{"lease-sweep-interval": true, "gc-interval": true}

// checkFlags refuses a numeric flag out of its range, naming the flag and,
// when the value came from the environment, the variable (vars maps a flag
// to the variable that set it). Then the checks between flags.
func checkFlags(fs *flag.FlagSet, vars map[string]string) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		b, ok := bounds[f.Name]
		if !ok {
			return
		}
		if err := b.check(f); err != nil {
			if v := vars[f.Name]; v != "" {
				err = fmt.Errorf("%w (from %s)", err, v)
			}
			errs = append(errs, err)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return crossCheck(fs)
}

// check tests f's value against b.
func (b bound) check(f *flag.Flag) error {
	var v float64
	show := func(x float64) string { return fmt.Sprint(x) }
	switch x := f.Value.(flag.Getter).Get().(type) {
	case int:
		v = float64(x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("--%s must be a finite number, got %s", f.Name, f.Value)
		}
		v = x
	case time.Duration:
		v = float64(x)
		show = func(x float64) string { return time.Duration(x).String() }
	default:
		return fmt.Errorf("--%s: not a numeric flag", f.Name) // a bounds entry for the wrong flag
	}
	switch {
	case v >= b.min && v <= b.max:
		return nil
	case b.max == noMax:
		return fmt.Errorf("--%s must be >= %s, got %s", f.Name, show(b.min), f.Value)
	}
	return fmt.Errorf("--%s must be within %s and %s, got %s", f.Name, show(b.min), show(b.max), f.Value)
}

// crossCheck tests what one flag's range depends on another.
func crossCheck(fs *flag.FlagSet) error {
	get := func(name string) int { return fs.Lookup(name).Value.(flag.Getter).Get().(int) }
	shards, connKB, statsKB, outMB := get("shards"), get("max-conn-output-kb"), get("max-stats-kb"), get("max-output-mb")
	switch {
	case shards&(shards-1) != 0:
		return fmt.Errorf("--shards must be a power of two, got %d", shards)
	case 2*statsKB > connKB:
		return fmt.Errorf("--max-stats-kb must be at most half of --max-conn-output-kb (%d), got %d", connKB, statsKB)
	case outMB != 0 && outMB<<10 < connKB:
		return fmt.Errorf("--max-output-mb (%d MiB) must be 0 or at least --max-conn-output-kb (%d KiB)", outMB, connKB)
	}
	return nil
}
