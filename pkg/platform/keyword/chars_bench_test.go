package keyword

import "testing"

// benchValue is a typical thing value: Chinese text with full-width
// punctuation and digits, within the 20 characters of a thing.
const benchValue = "请于7月5日（周五）前报送《值班表》"

func BenchmarkValid(b *testing.B) {
	b.SetBytes(int64(len(benchValue)))
	b.ReportAllocs()
	for b.Loop() {
		if !Valid("thing", benchValue) {
			b.Fatal("refused")
		}
	}
}

// BenchmarkValidAstral is Valid on characters beyond the Basic Multilingual
// Plane (CJK extension B), which miss the table's fast path.
func BenchmarkValidAstral(b *testing.B) {
	const v = "\U00020000\U00020001\U0002A6D6\U00020002"
	b.SetBytes(int64(len(v)))
	b.ReportAllocs()
	for b.Loop() {
		if !Valid("thing", v) {
			b.Fatal("refused")
		}
	}
}

func BenchmarkValidClean(b *testing.B) {
	const v = "\u3000\u3000" + benchValue + "\u200b"
	b.SetBytes(int64(len(v)))
	b.ReportAllocs()
	for b.Loop() {
		if Clean(v) == v {
			b.Fatal("unchanged")
		}
	}
}
