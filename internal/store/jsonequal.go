package store

import (
	"bytes"
	"encoding/json"
	"math/big"
)

// JSONEqual reports whether a and b hold the same JSON value: objects
// compare by their members whatever the key order, spacing does not count,
// and numbers compare by value exactly (1, 1.0 and 1e0 are equal;
// 9007199254740993 and 9007199254740992 are not, as they would be as
// float64; numbers of more than numberDigits characters compare as text).
// The two drivers store JSON differently (PostgreSQL's jsonb
// reorders keys and respaces, SQLite keeps the text), so the ledger's
// equality questions (is this the state already applied, is this the
// request already behind the key) are answered here, once, on values.
// Text that is not JSON compares as bytes.
func JSONEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	va, errA := decodeJSON(a)
	vb, errB := decodeJSON(b)
	if errA != nil || errB != nil {
		return false
	}
	return jsonValueEqual(va, vb)
}

func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, &json.SyntaxError{Offset: d.InputOffset()}
	}
	return v, nil
}

func jsonValueEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonValueEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonValueEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		return numberEqual(string(x), string(y))
	default: // string, bool, nil
		return a == b
	}
}

// numberDigits bounds the numbers compared by value: big.Floats of
// numberPrec bits (about 331 decimal digits) tell apart any two decimals
// of this many characters that differ, and an
// exponent such as 1e999999999 costs nothing in a big.Float (a big.Rat
// would expand it).
const (
	numberDigits = 300
	numberPrec   = 1100
)

func numberEqual(x, y string) bool {
	if len(x) > numberDigits || len(y) > numberDigits {
		return false
	}
	fx, _, errx := big.ParseFloat(x, 10, numberPrec, big.ToNearestEven)
	fy, _, erry := big.ParseFloat(y, 10, numberPrec, big.ToNearestEven)
	if errx != nil || erry != nil || fx.IsInf() || fy.IsInf() {
		return false // beyond big.Float's exponent range: the text differs
	}
	return fx.Cmp(fy) == 0
}
