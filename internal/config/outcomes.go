package config

import (
	"fmt"
	"slices"
	"time"

	"github.com/hookledger/hookledger/internal/expr"
)

// onDeadlineDead is the one on_deadline value besides empty: once the
// deadline has passed, the effect stops trying and waits for a person.
const onDeadlineDead = "dead"

// parseDeadline tells a deadline's two forms apart: a value that parses
// as a Go duration ("30m", "2h", "1h30m") is a duration after the event's
// occurrence time, whatever else it could be; anything else must be an
// expression. The rule is deterministic, so a duration never becomes an
// expression by a typo of the expression language.
func parseDeadline(s string) (time.Duration, bool) {
	d, err := time.ParseDuration(s)
	return d, err == nil
}

// compileOutcomes checks and compiles an effect's deadline and
// compensation fields into ce.
func compileOutcomes(add addFunc, compileE func(field, src string, required bool) *expr.Program, f *Flow, e *Effect, ep string, ce *CompiledEffect) {
	what := fmt.Sprintf("flow %q: effect %q", f.Name, e.Name)
	if e.Deadline != "" {
		if d, ok := parseDeadline(e.Deadline); ok {
			if d <= 0 {
				add(ep+".deadline", "%s: deadline %q must be a positive duration after the event's occurrence time", what, e.Deadline)
			}
			ce.DeadlineAfter = d
		} else if prog, err := expr.Compile(e.Deadline); err != nil {
			add(ep+".deadline", "%s: deadline %q is neither a duration (such as 30m or 2h) nor a valid expression giving a timestamp: %v", what, e.Deadline, err)
		} else {
			ce.Deadline = prog
		}
	}
	switch e.OnDeadline {
	case "":
	case onDeadlineDead:
		if e.Deadline == "" {
			add(ep+".on_deadline", "%s: on_deadline needs a deadline", what)
		}
	default:
		add(ep+".on_deadline", "%s: on_deadline %q: the only value is %q (stop trying once the deadline has passed and hand the effect to a person); leave it out to keep trying", what, e.OnDeadline, onDeadlineDead)
	}

	if e.CompensateWhen != "" && e.Compensation == nil {
		add(ep+".compensate_when", "%s: compensate_when needs a compensation: the request that undoes the effect", what)
	}
	ce.CompensateWhen = compileE("compensate_when", e.CompensateWhen, false)
	c := e.Compensation
	if c == nil {
		return
	}
	cp := ep + ".compensation"
	if !slices.Contains([]string{"GET", "POST", "PUT", "PATCH", "DELETE"}, c.Method) {
		add(cp+".method", "%s: compensation.method %q is not GET, POST, PUT, PATCH or DELETE", what, c.Method)
	}
	cc := &CompiledEffect{Headers: map[string]*expr.Program{}}
	if c.Path == "" {
		add(cp, "%s: compensation.path is required", what)
	}
	cc.Path = compileE("compensation.path", c.Path, false)
	checkPathExpr(add, cp+".path", what+": compensation.path", cc.Path)
	cc.Query = compileE("compensation.query", c.Query, false)
	checkQueryExpr(add, cp+".query", what+": compensation.query", cc.Query)
	cc.Body = compileE("compensation.body", c.Body, false)
	for h, src := range c.Headers {
		cc.Headers[h] = compileE("compensation.headers."+h, src, true)
		checkHeaderExpr(add, cp+".headers."+h, fmt.Sprintf("%s: compensation.headers.%s", what, h), h, cc.Headers[h])
	}
	ce.Compensation = cc
}
