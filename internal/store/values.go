package store

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrRefused marks a write the database refused because of the values of
// one item (text it cannot hold, a row over one of its limits), never
// because of the database itself. Retrying the same item cannot succeed,
// so a stage that meets it dead-letters or parks that item with the reason
// and goes on with the others (docs/architecture.md, "One bad input never
// stops the line"). Drivers wrap such errors by their codes; callers test
// with errors.Is.
var ErrRefused = errors.New("the database refused a value")

// ValueError says which value breaks which rule of what every driver can
// store. Its text names the field and the rule, never the value: the value
// may be the very bytes that cannot be stored or shown.
type ValueError struct {
	Field string
	Rule  string
}

func (e *ValueError) Error() string { return e.Field + ": " + e.Rule }

// CheckText reports whether s is text that every driver stores as given:
// valid UTF-8 without NUL. SQLite would keep both; PostgreSQL's text and
// jsonb refuse them, so the same input must be refused on both.
func CheckText(field, s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return &ValueError{field, fmt.Sprintf("holds a NUL character (byte %d)", i)}
	}
	if !utf8.ValidString(s) {
		return &ValueError{field, fmt.Sprintf("is not valid UTF-8 (byte %d)", invalidAt(s))}
	}
	return nil
}

// CheckID is CheckText for an identity (event id, type, entity, account,
// version, key): besides, it holds no control character (C0, DEL or C1),
// since identities travel in HTTP headers, log lines and URLs, and is at
// most MaxIdentityBytes long.
func CheckID(field, s string) error {
	if err := CheckText(field, s); err != nil {
		return err
	}
	for i, r := range s {
		if isControl(r) {
			return &ValueError{field, fmt.Sprintf("holds the control character %U (byte %d)", r, i)}
		}
	}
	if len(s) > MaxIdentityBytes {
		return &ValueError{field, fmt.Sprintf("is %d bytes long; the limit is %d", len(s), MaxIdentityBytes)}
	}
	return nil
}

// CheckJSON reports whether b, a JSON document, is one that every driver
// stores as given: valid UTF-8 and no string holding U+0000 (written
// \u0000), which PostgreSQL's jsonb refuses. It does not validate the
// JSON grammar: callers hold documents they parsed or encoded themselves.
func CheckJSON(field string, b []byte) error {
	if !utf8.Valid(b) {
		return &ValueError{field, fmt.Sprintf("is not valid UTF-8 (byte %d)", invalidAt(string(b)))}
	}
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case 0:
			return &ValueError{field, fmt.Sprintf("holds a NUL character (byte %d)", i)}
		case '\\':
			// An escape: \u0000 is the one jsonb refuses; any other
			// (including an escaped backslash before "u0000") is skipped
			// whole.
			if i+5 < len(b) && b[i+1] == 'u' && string(b[i+2:i+6]) == "0000" {
				return &ValueError{field, fmt.Sprintf("holds a string with U+0000 (byte %d)", i)}
			}
			i++
		}
	}
	return nil
}

// Storable turns a text the engine writes about an item (a reason, an
// error's text) into one every driver can store: invalid UTF-8 becomes
// U+FFFD and NUL is dropped. A reason must never be the next value the
// database refuses.
func Storable(s string) string {
	if strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// isControl reports the C0 controls, DEL and the C1 controls.
func isControl(r rune) bool {
	return r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f
}

// invalidAt is the offset of the first byte of s that is not valid UTF-8.
func invalidAt(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return len(s)
}

// ErrorKinds tells what a database's errors mean to the rules. Each
// driver says which of its errors are a unique violation and which a
// refusal of the statement's values, by the database's codes (never by
// message text); the marks go on the same way for every driver.
type ErrorKinds struct {
	Unique, Refused func(error) bool
}

// MarkRefused marks err as ErrRefused when the database refused the
// statement's values.
func (k ErrorKinds) MarkRefused(err error) error {
	if err == nil || errors.Is(err, ErrRefused) || !k.Refused(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrRefused, err)
}

// Classify marks a unique violation as ErrConflict and a refusal as
// ErrRefused, for the rules and their callers to tell apart.
func (k ErrorKinds) Classify(err error) error {
	if err != nil && k.Unique(err) {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return k.MarkRefused(err)
}

// Wrap is Classify with what failed in front; nil stays nil.
func (k ErrorKinds) Wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, k.Classify(err))
}

// NoRow is the answer of a read by key that failed with err: nothing, and
// no error, when err is noRows (the driver's "no row" error), because
// such a read answers nil for a key it does not find; otherwise err,
// wrapped with the context format and args give ("" for none).
func NoRow[T any](err, noRows error, format string, args ...any) (*T, error) {
	if errors.Is(err, noRows) {
		return nil, nil
	}
	if format == "" {
		return nil, err
	}
	return nil, fmt.Errorf(format+": %w", append(args, err)...)
}
