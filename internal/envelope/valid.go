package envelope

// validJSON reports whether b is exactly one JSON value, surrounded by
// nothing but whitespace. It accepts exactly what encoding/json.Valid
// accepts, and is held to that by FuzzValidMatchesEncodingJSON:
//
//   - strings are not checked for valid UTF-8 (decoding replaces bad bytes
//     with U+FFFD), but control characters below 0x20 are refused;
//   - objects and arrays nest at most maxNestingDepth deep.
//
// It is written here because json.Valid steps a state machine through an
// indirect call per byte, and on the receiver's hot path that was the
// largest single cost of reading a webhook (about 12 µs of 25 for a 2 KB
// Stripe event). The libraries that validate faster are stricter than
// encoding/json (they refuse invalid UTF-8 or repeated keys), and would
// refuse webhooks that the rest of hookledger, which decodes with
// encoding/json, reads fine.
func validJSON(b []byte) bool {
	var stackBuf [32]byte
	stack := stackBuf[:0] // '{' or '[' for each open container
	i := skipSpace(b, 0)
	for {
		// A value starts at i.
		if i >= len(b) {
			return false
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) == maxNestingDepth {
				return false
			}
			stack = append(stack, c)
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == closing(c) {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i = objectKey(b, i); i < 0 {
					return false
				}
			}
			continue
		case c == '"':
			if i = stringValid(b, i); i < 0 {
				return false
			}
		case c == '-' || c >= '0' && c <= '9':
			if i = numberValid(b, i); i < 0 {
				return false
			}
		case c == 't':
			if i = literal(b, i, "true"); i < 0 {
				return false
			}
		case c == 'f':
			if i = literal(b, i, "false"); i < 0 {
				return false
			}
		case c == 'n':
			if i = literal(b, i, "null"); i < 0 {
				return false
			}
		default:
			return false
		}

		// A value ended at i: close containers until another value is due.
		for {
			i = skipSpace(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := stack[len(stack)-1]
			if b[i] == closing(top) {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return false
			}
			i = skipSpace(b, i+1)
			if top == '{' {
				if i = objectKey(b, i); i < 0 {
					return false
				}
			}
			break
		}
	}
}

// maxNestingDepth is encoding/json's limit on open objects and arrays.
const maxNestingDepth = 10000

func closing(open byte) byte {
	if open == '{' {
		return '}'
	}
	return ']'
}

// objectKey reads a member's key and its colon at b[i] and returns the
// index of its value (after whitespace), or -1.
func objectKey(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = stringValid(b, i); i < 0 {
		return -1
	}
	if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

// plainByte marks the bytes that stand for themselves inside a string:
// everything but the quote, the backslash and control characters.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// stringValid returns the index just past the string that opens at b[i],
// or -1.
func stringValid(b []byte, i int) int {
	for i++; i < len(b); i++ {
		c := b[i]
		if plainByte[c] {
			continue
		}
		switch c {
		case '"':
			return i + 1
		case '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		default:
			return -1 // a control character
		}
	}
	return -1
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// numberValid returns the index just past the number that starts at b[i]
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?), or -1.
func numberValid(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// literal returns the index just past word at b[i], or -1.
func literal(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}
