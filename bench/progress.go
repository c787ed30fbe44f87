package bench

import (
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/latchd/latchd/internal/clock"
)

// IsTerminal reports whether w is a terminal (the progress bar shows only
// then, so logs and pipes stay clean).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Progress draws a progress bar for a sweep on w. In rounds mode it counts
// the ops of the counter it hands out; in duration mode it counts time.
type Progress struct {
	ops  atomic.Int64
	bar  *progressbar.ProgressBar
	stop chan struct{}
	done chan struct{}
}

// StartProgress starts drawing the bar for a sweep of cfg on w.
func StartProgress(w io.Writer, cfg Config) *Progress {
	total, desc := TotalOps(cfg), "ops"
	byTime := total == 0
	if byTime {
		// the sweep's time, not counting connection set-up
		total, desc = (cfg.Duration * time.Duration(len(cfg.Workers)*len(cfg.Targets))).Milliseconds(), "ms"
	}
	p := &Progress{stop: make(chan struct{}), done: make(chan struct{})}
	p.bar = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("latchd-bench"),
		progressbar.OptionSetItsString(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	start := time.Now()
	go func() {
		defer close(p.done)
		clock.Every(p.stop, 100*time.Millisecond, func() {
			if byTime {
				_ = p.bar.Set64(min(total, time.Since(start).Milliseconds()))
			} else {
				_ = p.bar.Set64(p.ops.Load())
			}
		})
	}()
	return p
}

// Counter is the op counter to hand to Sweep.
func (p *Progress) Counter() *atomic.Int64 { return &p.ops }

// Stop removes the bar.
func (p *Progress) Stop() {
	close(p.stop)
	<-p.done
	_ = p.bar.Finish()
	_ = p.bar.Clear()
}
