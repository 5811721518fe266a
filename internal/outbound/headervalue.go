package outbound

import (
	"fmt"
	"strings"
)

// EncodeHeaderValue writes a value that comes from stored data (a
// causation id holds a sender's event id) so that any HTTP header can
// carry it to any receiver: every byte outside visible ASCII (0x21 to
// 0x7E: controls, space, DEL and the bytes of non-ASCII UTF-8) and "%"
// itself become %XX, with upper-case hex; every other byte is kept.
// Sent raw, a control character is refused by the client (a dead effect
// that no retry can fix) and non-ASCII bytes are read differently by
// different servers and proxies. A value of visible ASCII without "%"
// is sent unchanged, and DecodeHeaderValue gives back exactly what was
// encoded.
func EncodeHeaderValue(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if mustEscape(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if mustEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func mustEscape(c byte) bool { return c <= 0x20 || c >= 0x7f || c == '%' }

// DecodeHeaderValue reverses EncodeHeaderValue: each %XX (either case of
// hex) becomes its byte. A "%" not followed by two hex digits is an
// error, naming where; the result may be any bytes, so a caller checks
// it as it would any untrusted text.
func DecodeHeaderValue(s string) (string, error) {
	i := strings.IndexByte(s, '%')
	if i < 0 {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return "", fmt.Errorf("%%-escape at byte %d is not %% and two hex digits", i)
		}
		b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
		i += 2
	}
	return b.String(), nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
