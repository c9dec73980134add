package filterview

import (
	"encoding/binary"
	"math"
	"math/bits"
	"math/rand"
	"sort"
	"syscall"
	"testing"
	"time"

	"exposurefilter/xxh3"
)

// encodeForBench writes a format-2 filter: items spread over `slices`
// 5-day slices, one prefix run per slice (U = 2^b), δ = 1%. A minimal
// encoder for the benchmark (the server's, src/filter/filter_encoder.cc,
// also seals, grows and re-truncates runs); Parse validates its output.
func encodeForBench(items []uint64, slices int, b uint) []byte {
	const span = 432000000
	out := []byte("EXPF")
	out = binary.LittleEndian.AppendUint16(out, 2)
	out = append(out, 1, byte(slices))
	out = binary.LittleEndian.AppendUint64(out, math.Float64bits(0.01))
	out = binary.LittleEndian.AppendUint64(out, span)
	per := (len(items) + slices - 1) / slices
	for s := 0; s < slices; s++ {
		part := items[s*per : min(len(items), (s+1)*per)]
		seen := map[uint64]bool{}
		var fps []uint64
		for _, h := range part {
			if f := h >> (64 - b); !seen[f] {
				seen[f] = true
				fps = append(fps, f)
			}
		}
		sort.Slice(fps, func(i, j int) bool { return fps[i] < fps[j] })
		u := uint64(1) << b
		k := uint(0)
		if mean := float64(u) / float64(len(fps)) * math.Ln2; mean >= 2 {
			k = uint(math.Floor(math.Log2(mean)))
		}
		var payload []byte
		pos := 0
		put := func(bit bool) {
			if pos>>3 >= len(payload) {
				payload = append(payload, 0)
			}
			if bit {
				payload[pos>>3] |= 1 << (pos & 7)
			}
			pos++
		}
		prev := int64(-1)
		var gaps []uint64
		for _, f := range fps {
			gaps = append(gaps, uint64(int64(f)-prev-1))
			prev = int64(f)
		}
		for _, d := range gaps {
			for i := uint(0); i < k; i++ {
				put(d>>i&1 == 1)
			}
		}
		for _, d := range gaps {
			for q := d >> k; q > 0; q-- {
				put(false)
			}
			put(true)
		}
		out = binary.LittleEndian.AppendUint64(out, uint64(int64(s)*span+1795392000000/span*span))
		out = append(out, 0, 1)
		out = binary.LittleEndian.AppendUint32(out, uint32(10+len(payload)))
		out = append(out, byte(b), byte(k))
		out = binary.LittleEndian.AppendUint32(out, uint32(len(fps)))
		out = binary.LittleEndian.AppendUint32(out, uint32(u-1))
		out = append(out, payload...)
	}
	return binary.LittleEndian.AppendUint64(out, xxh3.Hash(out))
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// As bench/filter_bench.cc's BM_RemoveExposedUser: 2,000 recorded items,
// 5,000 candidates of which half are recorded items.
func benchSetup(tb testing.TB, slices int) (*FilterView, []uint64, []uint64) {
	rng := rand.New(rand.NewSource(1))
	ids := make([]uint64, 2000)
	items := make([]uint64, len(ids))
	for i := range ids {
		ids[i] = rng.Uint64()
		items[i] = HashID(ids[i])
	}
	// A slice's share of δ = 1%: b with n / 2^b <= 1% / slices.
	b := uint(bits.Len64(uint64(float64(len(items)/slices) / (0.01 / float64(slices)))))
	view, err := Parse(encodeForBench(items, slices, b))
	if err != nil {
		tb.Fatal(err)
	}
	cands := make([]uint64, 5000)
	for i := range cands {
		cands[i] = rng.Uint64()
		if i%2 == 0 {
			cands[i] = ids[(i*7919)%len(ids)]
		}
	}
	hashes := make([]uint64, len(cands))
	for i, c := range cands {
		hashes[i] = HashID(c)
	}
	return view, cands, hashes
}

func TestBenchFilterHasNoFalseNegatives(t *testing.T) {
	for _, slices := range []int{1, 7} {
		view, cands, hashes := benchSetup(t, slices)
		if len(view.Slices) != slices {
			t.Fatalf("%d slices", len(view.Slices))
		}
		keep := view.KeepMaskHashes(hashes)
		removedFresh := 0
		for i := range cands {
			if i%2 == 0 && keep[i] {
				t.Fatalf("%d slices: recorded candidate %d kept", slices, i)
			}
			if i%2 == 1 && !keep[i] {
				removedFresh++
			}
			if keep[i] == view.MayContainHash(hashes[i]) {
				t.Fatalf("batch and single answers differ at %d", i)
			}
		}
		if fp := float64(removedFresh) / 2500; fp > 0.03 {
			t.Errorf("%d slices: fresh candidates removed %.3f", slices, fp)
		}
	}
}

func benchmarkKeepMask(b *testing.B, slices int, hashIDs bool) {
	view, cands, hashes := benchSetup(b, slices)
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for i := 0; i < b.N; i++ {
		if hashIDs {
			view.KeepMaskIDs(cands)
		} else {
			view.KeepMaskHashes(hashes)
		}
	}
	cpu := cpuTime() - cpu0
	wall := time.Since(start)
	b.ReportMetric(float64(wall.Nanoseconds())/float64(b.N)/float64(len(cands)), "ns/candidate")
	// CPU time (the process's, garbage collection included) is what the C++
	// figure reports; on a shared machine wall time also counts waiting.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1000, "cpu-µs/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(len(cands)), "cpu-ns/candidate")
}

// 5,000 hashed candidates against 2,000 items (what the C++
// BM_RemoveExposedUser times).
func BenchmarkKeepMaskHashes2000Items7Slices(b *testing.B) { benchmarkKeepMask(b, 7, false) }
func BenchmarkKeepMaskHashes2000Items1Slice(b *testing.B)  { benchmarkKeepMask(b, 1, false) }

// The same with the ids hashed in the call (XXH3 of 5,000 ids).
func BenchmarkKeepMaskIDs2000Items7Slices(b *testing.B) { benchmarkKeepMask(b, 7, true) }
