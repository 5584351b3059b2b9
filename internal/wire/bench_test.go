package wire

import (
	"strings"
	"testing"
)

// BenchmarkDecode_<body> measures decoding and validating one send frame.
func BenchmarkDecode_200B(b *testing.B)  { benchDecode(b, 200) }
func BenchmarkDecode_16KiB(b *testing.B) { benchDecode(b, 16<<10) }

func benchDecode(b *testing.B, n int) {
	frame := []byte(`{"op":"send","client_msg_id":"0193a0c2-7b6e-7c41-9d55-3f2c7e1f0a11","session_id":"g-5b1f00112233445566778899aabbccdd","type":"text","body":"` + strings.Repeat("x", n) + `"}`)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(frame, DefaultLimits); err != nil {
			b.Fatal(err)
		}
	}
}
