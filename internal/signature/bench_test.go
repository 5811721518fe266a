package signature

import (
	"bytes"
	"testing"
)

// BenchmarkVerify measures one successful verification per scheme with a
// 2 KiB body and two configured secrets (the signature matches the second,
// the rotation worst case).
func BenchmarkVerify(b *testing.B) {
	body := bytes.Repeat([]byte(`{"k":"v"},`), 205)
	for _, kc := range kindCases() {
		b.Run(kc.name, func(b *testing.B) {
			o := kc.opts
			o.Secrets = []string{kc.rotated}
			req := newReq()
			req.Body = body
			h, err := mustNew(b, o).Sign(req, t0, "msg_2Lq3bX")
			if err != nil {
				b.Fatal(err)
			}
			req.Header = h
			both := kc.opts
			both.Secrets = append(append([]string{}, kc.opts.Secrets...), kc.rotated)
			s := mustNew(b, both)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := s.Verify(req, t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
