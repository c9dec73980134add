// Package filterview decodes the exposure-filter portable filter format,
// versions 2 and 1 (docs/filter-format.md), and answers membership exactly
// as the server's FilterRecalled does. Written from the spec alone, with
// the standard library and this module's xxh3; checked against the golden
// vectors in tests/testdata/ (format 2) and tests/testdata/format1/.
//
//	view, err := filterview.Parse(resp.GetFilter())   // errors.Is(err, filterview.ErrMalformed)
//	view.MayContainID(123)                            // true: maybe exposed (drop)
//	keep := view.KeepMaskIDs(ids)                     // keep[i]: never exposed
//
// A FilterView is immutable after Parse and safe for concurrent use. It
// keeps a reference to the bytes (the Bloom blocks of legacy slices are
// read in place): do not modify them.
package filterview

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"sync"

	"exposurefilter/xxh3"
)

const (
	// HashSeed is the items' XXH3-64 seed: ASCII "exposure" read as a LE u64.
	HashSeed = 0x657275736f707865

	trailerBytes        = 8
	hashXXH3            = 1
	blockBytes          = 64
	maxSlices           = 8
	maxSegmentsPerSlice = 8
	maxBlocksPerSegment = 1 << 26
	minProbes           = 1
	maxProbes           = 16
	minFPRate           = 1e-6
	maxFPRate           = 0.5
	probeMultiplier     = 0x9e3779b9

	header2Bytes      = 24
	slice2Bytes       = 10
	segment2Bytes     = 5
	runHeaderBytes    = 10
	minSliceSpanMs    = 1000
	maxRiceK          = 31
	maxRunPayloadSize = 1<<29 - 8 // a run's payload (L - 10) is shorter

	header1Bytes  = 32
	segment1Bytes = 32
	blockLog2     = 6
	maxSegments1  = 64
)

// FormatVersions are the format versions this decoder reads; send them as
// GetFilterRequest.accepted_formats.
var FormatVersions = []uint32{1, 2}

// ErrMalformed matches (errors.Is) every error Parse returns: the bytes
// are not a valid filter of a version this decoder reads.
var ErrMalformed = errors.New("malformed filter")

// ErrEmptyKey matches the error of a key check given the empty key, which
// is not an item (the server rejects it with INVALID_ARGUMENT).
var ErrEmptyKey = errors.New("empty item key")

type malformed struct{ msg string }

func (e *malformed) Error() string        { return "malformed filter: " + e.msg }
func (e *malformed) Is(target error) bool { return target == ErrMalformed }

func bad(format string, args ...interface{}) error {
	return &malformed{fmt.Sprintf(format, args...)}
}

type emptyKey struct{ field string }

func (e *emptyKey) Error() string {
	return e.field + ": empty (an item key is at least 1 byte; the server rejects empty keys)"
}
func (e *emptyKey) Is(target error) bool { return target == ErrEmptyKey }

// HashID is the 64-bit hash of a numeric item id.
func HashID(id uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], id)
	return xxh3.HashSeed(b[:], HashSeed)
}

// HashKey is the 64-bit hash of a string item key (its bytes as given).
func HashKey(key string) uint64 { return xxh3.HashSeed([]byte(key), HashSeed) }

// Segment is a blocked Bloom segment: format 1's, or a legacy slice's in
// format 2.
type Segment struct {
	StartMs, EndMs int64
	NumBlocks      uint32
	ItemCount      uint32 // format 1 only (informational)
	K              int    // probes per item
	Level          int    // position in its slice
	offset         int    // where its blocks start in the filter bytes
}

// Run is a Golomb-Rice coded set of fingerprints (format 2).
type Run struct {
	Precision    int    // b, 1..32
	Universe     uint64 // U, 2..2^b
	RiceK        int
	Count        int // n
	PayloadBytes int
	fps          []uint32 // ascending, all < U
}

// Fingerprint is fp(h) = (prefix_b(h) * U) >> b.
func (r *Run) Fingerprint(h uint64) uint64 {
	return ((h >> (64 - uint(r.Precision))) * r.Universe) >> uint(r.Precision)
}

// Fingerprints returns the run's fingerprints, ascending (do not modify).
func (r *Run) Fingerprints() []uint32 { return r.fps }

func (r *Run) containsHash(h uint64) bool {
	f := uint32(r.Fingerprint(h))
	i := sort.Search(len(r.fps), func(i int) bool { return r.fps[i] >= f })
	return i < len(r.fps) && r.fps[i] == f
}

// Slice is one time slice [StartMs, EndMs) and what claims its items.
type Slice struct {
	StartMs, EndMs int64
	Segments       []*Segment
	Runs           []*Run
}

// FilterView is a parsed, validated filter.
type FilterView struct {
	FormatVersion int
	FPRateTarget  float64
	SliceSpanMs   int64
	Checksum      uint64
	Slices        []*Slice
	segments      []*Segment
	runs          []*Run
	data          []byte
}

// Version is the GetFilter version of these bytes: the checksum as 16
// lowercase hex digits.
func (v *FilterView) Version() string { return fmt.Sprintf("%016x", v.Checksum) }

// Segments lists every Bloom segment, slice by slice.
func (v *FilterView) Segments() []*Segment { return v.segments }

// Runs lists every fingerprint run, slice by slice.
func (v *FilterView) Runs() []*Run { return v.runs }

// SizeBytes approximates the memory the view holds: the filter bytes and
// the decoded fingerprints.
func (v *FilterView) SizeBytes() int {
	n := len(v.data) + 256
	for _, r := range v.runs {
		n += 4*len(r.fps) + 64
	}
	return n
}

// Parse validates data and returns its view, or an error matching
// ErrMalformed at the first failed check of docs/filter-format.md ("What a
// decoder must reject"), in that order.
func Parse(data []byte) (*FilterView, error) {
	if len(data) < 6 || string(data[:4]) != "EXPF" {
		if len(data) < header2Bytes+trailerBytes {
			return nil, bad("length %d is shorter than a header", len(data))
		}
		return nil, bad("bad magic")
	}
	switch version := binary.LittleEndian.Uint16(data[4:]); version {
	case 2:
		return parse2(data)
	case 1:
		return parse1(data)
	default:
		return nil, bad("unsupported format version %d: this decoder reads format versions 1 and 2; "+
			"upgrade the exposure-filter Go client (docs/filter-format.md) or use FilterRecalled", version)
	}
}

func checksum(data []byte) (uint64, error) {
	end := len(data) - trailerBytes
	want := binary.LittleEndian.Uint64(data[end:])
	if xxh3.Hash(data[:end]) != want {
		return 0, bad("checksum mismatch")
	}
	return want, nil
}

func checkSegment(i int, numBlocks uint32, k int) error {
	if numBlocks < 1 || numBlocks > maxBlocksPerSegment {
		return bad("segment %d block count %d out of range", i, numBlocks)
	}
	if k < minProbes || k > maxProbes {
		return bad("segment %d probe count %d out of range", i, k)
	}
	return nil
}

func checkFPRate(r float64) error {
	if !(r >= minFPRate && r <= maxFPRate) { // NaN fails too
		return bad("fp target %v outside [1e-6, 0.5]", r)
	}
	return nil
}

func parse2(data []byte) (*FilterView, error) {
	size := len(data)
	if size < header2Bytes+trailerBytes {
		return nil, bad("length %d is shorter than header", size)
	}
	if data[6] != hashXXH3 {
		return nil, bad("unknown hash algorithm %d", data[6])
	}
	sum, err := checksum(data)
	if err != nil {
		return nil, err
	}
	count := int(data[7])
	fpRate := math.Float64frombits(binary.LittleEndian.Uint64(data[8:]))
	span := int64(binary.LittleEndian.Uint64(data[16:]))
	if count > maxSlices {
		return nil, bad("slice count %d exceeds %d", count, maxSlices)
	}
	if err := checkFPRate(fpRate); err != nil {
		return nil, err
	}
	if span < minSliceSpanMs {
		return nil, bad("slice span %d ms below 1000", span)
	}
	v := &FilterView{FormatVersion: 2, FPRateTarget: fpRate, SliceSpanMs: span, Checksum: sum, data: data}
	bodyEnd := uint64(size - trailerBytes)
	off := uint64(header2Bytes)
	fits := func(n uint64) bool { return n <= bodyEnd-off }
	nSegments, nRuns := 0, 0
	for s := 0; s < count; s++ {
		if !fits(slice2Bytes) {
			return nil, bad("slice %d header truncated", s)
		}
		start := int64(binary.LittleEndian.Uint64(data[off:]))
		g, r := int(data[off+8]), int(data[off+9])
		off += slice2Bytes
		if start < 0 || start%span != 0 || start > math.MaxInt64-span {
			return nil, bad("slice %d start %d is not a non-negative multiple of the span", s, start)
		}
		if len(v.Slices) > 0 && start <= v.Slices[len(v.Slices)-1].StartMs {
			return nil, bad("slice %d out of order", s)
		}
		if g > maxSegmentsPerSlice || g+r == 0 {
			return nil, bad("slice %d has %d segments and %d runs", s, g, r)
		}
		sl := &Slice{StartMs: start, EndMs: start + span}
		if !fits(uint64(segment2Bytes * g)) {
			return nil, bad("slice %d segment table truncated", s)
		}
		for j := 0; j < g; j++ {
			n := binary.LittleEndian.Uint32(data[off:])
			k := int(data[off+4])
			off += segment2Bytes
			if err := checkSegment(nSegments+j, n, k); err != nil {
				return nil, err
			}
			sl.Segments = append(sl.Segments, &Segment{StartMs: sl.StartMs, EndMs: sl.EndMs, NumBlocks: n, K: k, Level: j})
		}
		for j := 0; j < r; j++ {
			if !fits(4) {
				return nil, bad("run %d length truncated", nRuns)
			}
			length := uint64(binary.LittleEndian.Uint32(data[off:]))
			off += 4
			if !fits(length) {
				return nil, bad("run %d truncated", nRuns)
			}
			run, err := decodeRun(data[off:off+length], int(length), nRuns)
			if err != nil {
				return nil, err
			}
			sl.Runs = append(sl.Runs, run)
			off += length
			nRuns++
		}
		for _, seg := range sl.Segments {
			n := uint64(seg.NumBlocks) * blockBytes
			if !fits(n) {
				return nil, bad("segment %d blocks truncated", nSegments)
			}
			seg.offset = int(off)
			off += n
			nSegments++
		}
		v.Slices = append(v.Slices, sl)
		v.segments = append(v.segments, sl.Segments...)
		v.runs = append(v.runs, sl.Runs...)
	}
	if off != bodyEnd {
		return nil, bad("%d trailing bytes", bodyEnd-off)
	}
	return v, nil
}

// decodeRun decodes and validates one run (its b, k, n, U - 1 and payload,
// which the caller has checked fit before the checksum), in the order of
// check 7e: the header, the codes' layout, then the fingerprints' range.
//
// run holds the run's bytes (the tests pass fewer than length: a payload
// past its limit is rejected before any payload byte is read).
func decodeRun(run []byte, length int, index int) (*Run, error) {
	if length < runHeaderBytes {
		return nil, bad("run %d of %d bytes is shorter than its %d-byte header", index, length, runHeaderBytes)
	}
	b := int(run[0])
	k := uint(run[1])
	n := uint64(binary.LittleEndian.Uint32(run[2:]))
	u := uint64(binary.LittleEndian.Uint32(run[6:])) + 1
	if b < 1 || b > 32 {
		return nil, bad("run %d precision %d outside 1..32", index, b)
	}
	if u < 2 || u > 1<<uint(b) {
		return nil, bad("run %d universe %d outside 2..2^%d", index, u, b)
	}
	if k > maxRiceK {
		return nil, bad("run %d Rice parameter %d above 31", index, k)
	}
	if n > u {
		return nil, bad("run %d count %d exceeds universe %d", index, n, u)
	}
	payloadBytes := length - runHeaderBytes
	if payloadBytes >= maxRunPayloadSize {
		return nil, bad("run %d payload of %d bytes is too large (at most 2^29 - 9)", index, payloadBytes)
	}
	if n == 0 {
		return nil, bad("run %d is empty", index)
	}
	total := uint64(payloadBytes) * 8
	if n*(uint64(k)+1) > total {
		return nil, bad("run %d truncated: %d codes of k = %d need more than %d payload bytes", index, n, k, payloadBytes)
	}
	p := run[runHeaderBytes:]
	if len(p) > payloadBytes {
		p = p[:payloadBytes]
	}
	fps := make([]uint32, n)
	pos := n * uint64(k) // the unary parts follow the n remainders
	next := uint64(0)    // f_(i-1) + 1
	rangeErr := -1       // the first code whose fingerprint reaches U
	mask := uint64(1)<<k - 1
	for i := uint64(0); i < n; i++ {
		// The next one bit at or after pos.
		byteIdx := pos >> 3
		if byteIdx >= uint64(len(p)) {
			return nil, bad("run %d truncated in code %d", index, i)
		}
		at := pos // bit position of the byte's lowest bit in cur
		cur := p[byteIdx] >> (pos & 7)
		for cur == 0 {
			byteIdx++
			if byteIdx >= uint64(len(p)) {
				return nil, bad("run %d truncated in code %d", index, i)
			}
			cur = p[byteIdx]
			at = byteIdx << 3
		}
		one := at + uint64(bits.TrailingZeros8(cur))
		q := one - pos
		pos = one + 1
		if rangeErr >= 0 {
			continue
		}
		if q >= u { // f_i >= q_i: at U already, and q_i << k could overflow
			rangeErr = int(i)
			continue
		}
		f := next + (q<<k | readBits(p, i*uint64(k), k)&mask)
		if f >= u {
			rangeErr = int(i)
			continue
		}
		fps[i] = uint32(f)
		next = f + 1
	}
	if (pos+7)/8 != uint64(payloadBytes) || (pos&7 != 0 && p[pos>>3]>>(pos&7) != 0) {
		return nil, bad("run %d has bytes or bits after its last code", index)
	}
	if rangeErr >= 0 {
		return nil, bad("run %d code %d: fingerprint reaches the universe %d", index, rangeErr, u)
	}
	return &Run{Precision: b, Universe: u, RiceK: int(k), Count: int(n), PayloadBytes: payloadBytes, fps: fps}, nil
}

// readBits reads k <= 31 bits at bit position pos, LSB first.
func readBits(p []byte, pos uint64, k uint) uint64 {
	if k == 0 {
		return 0
	}
	i := pos >> 3
	var w uint64
	if i+8 <= uint64(len(p)) {
		w = binary.LittleEndian.Uint64(p[i:])
	} else {
		for j := uint64(0); i+j < uint64(len(p)); j++ {
			w |= uint64(p[i+j]) << (8 * j)
		}
	}
	return w >> (pos & 7)
}

func parse1(data []byte) (*FilterView, error) {
	size := len(data)
	if size < header1Bytes+trailerBytes {
		return nil, bad("length %d is shorter than header", size)
	}
	if hs := binary.LittleEndian.Uint16(data[6:]); hs != header1Bytes {
		return nil, bad("unexpected header size %d", hs)
	}
	if binary.LittleEndian.Uint64(data[8:]) != HashSeed || data[20] != hashXXH3 {
		return nil, bad("unknown hash algorithm or seed")
	}
	if data[21] != blockLog2 {
		return nil, bad("unknown block size")
	}
	sum, err := checksum(data)
	if err != nil {
		return nil, err
	}
	count := uint64(binary.LittleEndian.Uint32(data[16:]))
	fpRate := math.Float64frombits(binary.LittleEndian.Uint64(data[24:]))
	if count > maxSegments1 {
		return nil, bad("segment count %d exceeds %d", count, maxSegments1)
	}
	if err := checkFPRate(fpRate); err != nil {
		return nil, err
	}
	bodyEnd := uint64(size - trailerBytes)
	off := header1Bytes + count*segment1Bytes
	if off > bodyEnd {
		return nil, bad("truncated segment table")
	}
	v := &FilterView{FormatVersion: 1, FPRateTarget: fpRate, Checksum: sum, data: data}
	var span int64
	for i := 0; i < int(count); i++ {
		e := data[header1Bytes+i*segment1Bytes:]
		start := int64(binary.LittleEndian.Uint64(e))
		end := int64(binary.LittleEndian.Uint64(e[8:]))
		n := binary.LittleEndian.Uint32(e[16:])
		items := binary.LittleEndian.Uint32(e[20:])
		k, level := int(e[24]), int(e[25])
		if err := checkSegment(i, n, k); err != nil {
			return nil, err
		}
		if start < 0 || end <= start {
			return nil, bad("segment %d does not cover [start_ms, end_ms) with 0 <= start", i)
		}
		var sl *Slice
		if len(v.Slices) > 0 && v.Slices[len(v.Slices)-1].StartMs == start {
			sl = v.Slices[len(v.Slices)-1]
			if sl.EndMs != end {
				return nil, bad("segment %d: slice end differs", i)
			}
			if level != len(sl.Segments) || level >= maxSegmentsPerSlice {
				return nil, bad("segment %d level %d out of order", i, level)
			}
		} else {
			if level != 0 {
				return nil, bad("segment %d starts a slice at level %d", i, level)
			}
			if len(v.Slices) > 0 && start < v.Slices[len(v.Slices)-1].StartMs {
				return nil, bad("segment %d: slices out of order", i)
			}
			if len(v.Slices) > 0 && end-start != span {
				return nil, bad("segment %d: slice span differs", i)
			}
			if len(v.Slices) >= maxSlices {
				return nil, bad("more than %d slices", maxSlices)
			}
			span = end - start
			sl = &Slice{StartMs: start, EndMs: end}
			v.Slices = append(v.Slices, sl)
		}
		nb := uint64(n) * blockBytes
		if nb > bodyEnd-off {
			return nil, bad("segment %d blocks truncated", i)
		}
		seg := &Segment{StartMs: start, EndMs: end, NumBlocks: n, ItemCount: items, K: k, Level: level, offset: int(off)}
		sl.Segments = append(sl.Segments, seg)
		v.segments = append(v.segments, seg)
		off += nb
	}
	if off != bodyEnd {
		return nil, bad("%d trailing bytes", bodyEnd-off)
	}
	v.SliceSpanMs = span
	return v, nil
}

func (v *FilterView) segmentClaims(s *Segment, h uint64) bool {
	block := v.data[s.offset+int(((h>>32)*uint64(s.NumBlocks))>>32)*blockBytes:]
	x := uint32(h)
	for i := 0; i < s.K; i++ {
		pos := x >> 23 // 0..511
		if block[pos>>3]>>(pos&7)&1 == 0 {
			return false
		}
		x *= probeMultiplier
	}
	return true
}

// MayContainHash reports whether any live slice claims the hash.
func (v *FilterView) MayContainHash(h uint64) bool {
	for _, s := range v.segments {
		if v.segmentClaims(s, h) {
			return true
		}
	}
	for _, r := range v.runs {
		if r.containsHash(h) {
			return true
		}
	}
	return false
}

// MayContainID: true = may have been exposed (drop), false = never (keep).
func (v *FilterView) MayContainID(id uint64) bool { return v.MayContainHash(HashID(id)) }

// MayContainKey is MayContainID for a string key; the empty key is an
// error matching ErrEmptyKey.
func (v *FilterView) MayContainKey(key string) (bool, error) {
	if key == "" {
		return false, &emptyKey{"key"}
	}
	return v.MayContainHash(HashKey(key)), nil
}

// KeepMaskHashes returns keep[i] = true where hashes[i] was never exposed.
// Runs are checked the batch way of the spec: the candidates sorted once by
// their hash's top 32 bits (a radix sort), then one merge per run.
func (v *FilterView) KeepMaskHashes(hashes []uint64) []bool {
	keep := make([]bool, len(hashes))
	for i := range keep {
		keep[i] = true
	}
	if len(v.segments) > 0 {
		for i, h := range hashes {
			for _, s := range v.segments {
				if v.segmentClaims(s, h) {
					keep[i] = false
					break
				}
			}
		}
	}
	if len(v.runs) == 0 || len(hashes) == 0 {
		return keep
	}
	scratch := sortByTop32(hashes)
	defer pairPool.Put(scratch)
	sorted := *scratch
	for _, r := range v.runs {
		fps := r.fps
		shift := 32 - uint(r.Precision)
		b := uint(r.Precision)
		j := 0
		for _, p := range sorted {
			// prefix_b(h) = top32(h) >> (32 - b), as b <= 32.
			f := uint32((uint64(p.key>>shift) * r.Universe) >> b)
			for j < len(fps) && fps[j] < f {
				j++
			}
			if j == len(fps) {
				break
			}
			if fps[j] == f {
				keep[p.idx] = false
			}
		}
	}
	return keep
}

type pair struct {
	key uint32 // the hash's top 32 bits
	idx int32
}

var pairPool = sync.Pool{New: func() interface{} { return new([]pair) }}

// sortByTop32 returns (h >> 32, index) pairs ordered by h >> 32: an LSD
// radix sort, three passes of 11 bits. Return the result to pairPool.
func sortByTop32(hashes []uint64) *[]pair {
	n := len(hashes)
	bufA := pairPool.Get().(*[]pair)
	bufB := pairPool.Get().(*[]pair)
	if cap(*bufA) < n {
		*bufA = make([]pair, n)
	}
	if cap(*bufB) < n {
		*bufB = make([]pair, n)
	}
	a, tmp := (*bufA)[:n], (*bufB)[:n]
	for i, h := range hashes {
		a[i] = pair{uint32(h >> 32), int32(i)}
	}
	for shift := uint(0); shift < 32; shift += 11 {
		var count [1 << 11]int32
		for _, p := range a {
			count[(p.key>>shift)&0x7ff]++
		}
		var sum int32
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for _, p := range a {
			d := (p.key >> shift) & 0x7ff
			tmp[count[d]] = p
			count[d]++
		}
		a, tmp = tmp, a
	}
	// Three passes: the result is in the second buffer.
	*bufB = a
	*bufA = tmp
	pairPool.Put(bufA)
	return bufB
}

// KeepMaskIDs is KeepMaskHashes over numeric ids.
func (v *FilterView) KeepMaskIDs(ids []uint64) []bool {
	h := make([]uint64, len(ids))
	for i, id := range ids {
		h[i] = HashID(id)
	}
	return v.KeepMaskHashes(h)
}

// KeepMaskKeys is KeepMaskHashes over string keys; an empty key is an
// error naming keys[i] (as FilterRecalled refuses the whole request).
func (v *FilterView) KeepMaskKeys(keys []string) ([]bool, error) {
	h := make([]uint64, len(keys))
	for i, k := range keys {
		if k == "" {
			return nil, &emptyKey{fmt.Sprintf("keys[%d]", i)}
		}
		h[i] = HashKey(k)
	}
	return v.KeepMaskHashes(h), nil
}

// EstimatedFPRate is P(a fresh item is claimed): 1 - prod(1 - p) over runs
// (p = n / U) and Bloom segments (p from the bits: the mean over blocks of
// (set bits / 512)^k). Informational: never a validity check.
func (v *FilterView) EstimatedFPRate() float64 {
	clean := 1.0
	for _, s := range v.segments {
		total := 0.0
		for b := 0; b < int(s.NumBlocks); b++ {
			ones := 0
			blk := v.data[s.offset+b*blockBytes : s.offset+(b+1)*blockBytes]
			for w := 0; w < blockBytes; w += 8 {
				ones += bits.OnesCount64(binary.LittleEndian.Uint64(blk[w:]))
			}
			total += math.Pow(float64(ones)/512, float64(s.K))
		}
		clean *= 1 - total/float64(s.NumBlocks)
	}
	for _, r := range v.runs {
		clean *= 1 - float64(r.Count)/float64(r.Universe)
	}
	return math.Min(1, math.Max(0, 1-clean))
}

// Aged returns the view without the slices that end at or before cutoffMs
// (format 2's rule: a slice is live while its end is after now - retention,
// so cutoffMs = now - retention), or v itself when every slice is live. The
// bytes are shared; v is not changed.
func (v *FilterView) Aged(cutoffMs int64) *FilterView {
	var live []*Slice
	for _, s := range v.Slices {
		if s.EndMs > cutoffMs {
			live = append(live, s)
		}
	}
	if len(live) == len(v.Slices) {
		return v
	}
	w := *v
	w.Slices, w.segments, w.runs = live, nil, nil
	for _, s := range live {
		w.segments = append(w.segments, s.Segments...)
		w.runs = append(w.runs, s.Runs...)
	}
	return &w
}
