package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressEvery is how often the plain progress line is printed when
// stderr is not a terminal.
const progressEvery = 5 * time.Second

// progress shows how far sluice enqueue is, on stderr: on a terminal,
// schollz/progressbar's bar (lines done of the total, the rate, the
// elapsed and remaining time); elsewhere (a CI log, a file) a plain line
// every progressEvery; nothing when quiet. A progress is used by one
// goroutine.
type progress struct {
	stderr io.Writer
	name   string
	bar    *progressbar.ProgressBar // on a terminal
	plain  bool                     // plain lines
	now    func() time.Time
	// total is the lines to do, -1 when unknown; done those done.
	total, done int64
	start, last time.Time
}

// newProgress shows the progress of name's total lines (-1: unknown) on
// stderr; quiet shows nothing.
func newProgress(stderr io.Writer, name string, total int64, quiet bool, now func() time.Time) *progress {
	p := &progress{stderr: stderr, name: name, now: now, total: total}
	p.start, p.last = now(), now()
	switch {
	case quiet || total == 0:
	case isTerminal(stderr):
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(stderr),
			progressbar.OptionSetDescription(name),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("lines"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionFullWidth(),
			// No spinner goroutine for an unknown total: the bar moves
			// when lines are done.
			progressbar.OptionSetSpinnerChangeInterval(0),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(stderr) }),
			progressbar.OptionSetRenderBlankState(true),
		)
	default:
		p.plain = true
	}
	return p
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// quiet reports whether nothing is shown.
func (p *progress) quiet() bool { return p.bar == nil && !p.plain }

// add counts n more lines done.
func (p *progress) add(n int64) {
	p.done += n
	switch {
	case p.bar != nil:
		_ = p.bar.Add64(n)
	case p.plain:
		if now := p.now(); now.Sub(p.last) >= progressEvery {
			p.last = now
			fmt.Fprintln(p.stderr, p.line(now))
		}
	}
}

// line is the plain progress line at now: "sluice enqueue: FILE: 1200 of
// 2000 lines (60%), 400 lines/s, 2s left".
func (p *progress) line(now time.Time) string {
	elapsed := now.Sub(p.start)
	rate := 0.0
	if elapsed > 0 {
		rate = float64(p.done) / elapsed.Seconds()
	}
	s := fmt.Sprintf("sluice enqueue: %s: %d", p.name, p.done)
	if p.total >= 0 {
		s += fmt.Sprintf(" of %d lines (%d%%)", p.total, p.done*100/max(p.total, 1))
	} else {
		s += " lines"
	}
	s += fmt.Sprintf(", %.0f lines/s", rate)
	if p.total >= 0 && rate > 0 {
		left := time.Duration(float64(max(0, p.total-p.done)) / rate * float64(time.Second))
		s += fmt.Sprintf(", %v left", left.Round(time.Second))
	}
	return s
}

// print writes line to w (stdout or stderr) without tearing the bar.
func (p *progress) print(w io.Writer, line string) {
	if p.bar != nil {
		_ = p.bar.Clear()
	}
	fmt.Fprintln(w, line)
}

// finish ends the bar: full when every line is done (ok), else where it
// stopped.
func (p *progress) finish(ok bool) {
	switch {
	case p.bar == nil:
	case ok:
		_ = p.bar.Finish()
	default:
		_ = p.bar.Exit()
	}
}
