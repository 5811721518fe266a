package expr_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/expr"
)

// decodeOracle is what DecodeJSON must answer: encoding/json's Decoder
// with UseNumber, numbers converted as json.Number's Int64 then Float64,
// except that a number beyond the range of a float64 is an error where
// encoding/json would give ±Inf.
func decodeOracle(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return oracleNumbers(v)
}

var errBeyondFloat = errors.New("number beyond the range of a float64")

func oracleNumbers(v any) (any, error) {
	var err error
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		f, _ := x.Float64()
		if math.IsInf(f, 0) {
			return nil, errBeyondFloat
		}
		return f, nil
	case []any:
		for i := range x {
			if x[i], err = oracleNumbers(x[i]); err != nil {
				return nil, err
			}
		}
	case map[string]any:
		for k := range x {
			if x[k], err = oracleNumbers(x[k]); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// sameValue is reflect.DeepEqual with NaN-free floats compared by bits, so
// -0 and 0 are told apart.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

var decodeCases = []string{
	`{"a":1,"b":[true,false,null],"c":"x"}`,
	`{"a":1,"a":2}`,
	`{"n":9223372036854775807,"m":9223372036854775808,"f":1.5,"e":1e3,"z":-0,"fz":-0.0,"small":1e-400}`,
	`{"big":1e400}`, `[-1e309]`,
	`{"s":"tab\tquote\" back\\ slash\/ uni\u00e9 pair\ud83d\ude00 lone\ud83d x lone2\ude00 hi\ud83d\u0041"}`,
	"{\"bad\":\"\xff\xfe ok \xe2\x82\"}",
	"{\"bad\":\"\xe2\\n\xa9\"}",
	`  [1, 2 ,3 ]  trailing`,
	`1x`, `01`, `"s"`, `true`, `null`, `[]`, `{}`, `-1.5e-3`,
	``, ` `, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[1 2]`, `tru`, `nul`, `-`, `1.`, `1e`, `1e+`, `.5`, `+1`,
	`"\u12"`, `"\x"`, "\"a\x01\"", `"abc`, `{"a":1`, `{1:2}`, "\ufeff{}",
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
}

func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	want, werr := decodeOracle(b)
	got, gerr := expr.DecodeJSON(b)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: error %v, encoding/json %v", b, gerr, werr)
	}
	if werr == nil && !sameValue(got, want) {
		t.Fatalf("%q: %#v, encoding/json %#v", b, got, want)
	}
	if gerr != nil && !strings.HasPrefix(gerr.Error(), "decode JSON: ") {
		t.Fatalf("%q: error %q does not say what failed", b, gerr)
	}
}

func TestDecodeJSONMatchesEncodingJSON(t *testing.T) {
	for _, c := range decodeCases {
		checkDecode(t, []byte(c))
	}
	v, _ := expr.DecodeJSON([]byte(`{"rev":3,"f":2.5}`))
	if m := v.(map[string]any); m["rev"] != int64(3) || m["f"] != 2.5 {
		t.Fatalf("numbers: %#v", m)
	}
}

// FuzzDecodeJSON holds the hand-written decoder to encoding/json on any
// input: the same values, and an error exactly when it errs.
func FuzzDecodeJSON(f *testing.F) {
	for _, c := range decodeCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecode(t, b) })
}

func BenchmarkDecodeJSON(b *testing.B) {
	body := []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2023-10-16","created":1686089970,` +
		`"data":{"object":{"id":"in_1NG8Du2eZvKYlo2C","object":"invoice","account_country":"US","amount_due":2000,"amount_paid":2000,` +
		`"amount_remaining":0,"attempt_count":1,"attempted":true,"billing_reason":"subscription_cycle","currency":"usd",` +
		`"customer":"cus_NffrFeUfNV2Hib","customer_email":"jenny.rosen@example.com","lines":{"object":"list","data":[` +
		`{"id":"il_1","amount":2000,"currency":"usd","description":"1 × Gold (at $20.00 / month)","period":{"end":1688681970,"start":1686089970},` +
		`"price":{"id":"price_1","unit_amount":2000,"recurring":{"interval":"month","interval_count":1}},"quantity":1}],"has_more":false},` +
		`"metadata":{"order":"A-1001","note":"caf\u00e9"},"paid":true,"status":"paid","subtotal":2000,"total":2000,"tax":null}},` +
		`"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"invoice.paid"}`)
	b.Run("hand-written", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := expr.DecodeJSON(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeOracle(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
