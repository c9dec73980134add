package filterview

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"exposurefilter/xxh3"
)

// The golden vectors (docs/filter-format.md, "Golden test vectors").
type vector struct {
	Name          string  `json:"name"`
	FormatVersion int     `json:"format_version"`
	Version       string  `json:"version"`
	FPRateTarget  float64 `json:"fp_rate_target"`
	SliceSpanMs   int64   `json:"slice_span_ms"`
	FilterSize    int     `json:"filter_size"`
	FilterHex     string  `json:"filter_hex"`
	Slices        []struct {
		StartMs       int64 `json:"start_ms"`
		EndMs         int64 `json:"end_ms"`
		BloomSegments []struct {
			NumBlocks uint32 `json:"num_blocks"`
			K         int    `json:"k"`
		} `json:"bloom_segments"`
		Runs []struct {
			Precision    int    `json:"precision"`
			Universe     uint64 `json:"universe"`
			RiceK        int    `json:"rice_k"`
			Count        int    `json:"count"`
			PayloadBytes int    `json:"payload_bytes"`
		} `json:"runs"`
	} `json:"slices"`
	Segments []struct { // format 1
		StartMs   int64  `json:"start_ms"`
		EndMs     int64  `json:"end_ms"`
		NumBlocks uint32 `json:"num_blocks"`
		ItemCount uint32 `json:"item_count"`
		K         int    `json:"k"`
		Level     int    `json:"level"`
	} `json:"segments"`
	Candidates []struct {
		ID         *string `json:"id"`
		Key        *string `json:"key"`
		MayContain bool    `json:"may_contain"`
	} `json:"candidates"`
	data []byte
}

func testdata(t testing.TB) string {
	dir := os.Getenv("EF_TESTDATA_DIR")
	if dir == "" {
		t.Fatal("set EF_TESTDATA_DIR to tests/testdata (ctest does this)")
	}
	return dir
}

func loadVectors(t testing.TB, dir string) map[string]*vector {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no vectors in %s: %v", dir, err)
	}
	out := map[string]*vector{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		v := &vector{}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if v.data, err = hex.DecodeString(v.FilterHex); err != nil {
			t.Fatal(err)
		}
		out[v.Name] = v
	}
	return out
}

func names(m map[string]*vector) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func reseal(data []byte) []byte {
	out := append([]byte(nil), data...)
	binary.LittleEndian.PutUint64(out[len(out)-8:], xxh3.Hash(out[:len(out)-8]))
	return out
}

func put(data []byte, offset int, value interface{}) []byte {
	out := append([]byte(nil), data...)
	switch x := value.(type) {
	case uint8:
		out[offset] = x
	case uint16:
		binary.LittleEndian.PutUint16(out[offset:], x)
	case uint32:
		binary.LittleEndian.PutUint32(out[offset:], x)
	case int64:
		binary.LittleEndian.PutUint64(out[offset:], uint64(x))
	case float64:
		binary.LittleEndian.PutUint64(out[offset:], math.Float64bits(x))
	default:
		panic("put: unsupported type")
	}
	return out
}

// checkAnswers asks every candidate one by one and, ids and keys, in a batch.
func checkAnswers(t *testing.T, vectors map[string]*vector) int {
	checked := 0
	for _, name := range names(vectors) {
		v := vectors[name]
		view, err := Parse(v.data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var ids, idHashes, keys []uint64
		var idKeep []bool
		var keyStrs []string
		var keyKeep []bool
		for _, c := range v.Candidates {
			var got bool
			if c.ID != nil {
				id, err := strconv.ParseUint(*c.ID, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				got = view.MayContainID(id)
				ids = append(ids, id)
				idHashes = append(idHashes, HashID(id))
				idKeep = append(idKeep, !c.MayContain)
			} else {
				if got, err = view.MayContainKey(*c.Key); err != nil {
					t.Fatal(err)
				}
				keyStrs = append(keyStrs, *c.Key)
				keys = append(keys, HashKey(*c.Key))
				keyKeep = append(keyKeep, !c.MayContain)
			}
			if got != c.MayContain {
				t.Errorf("%s: candidate id=%v key=%v: got %v, want %v", name, c.ID, c.Key, got, c.MayContain)
			}
			checked++
		}
		if got := view.KeepMaskIDs(ids); !reflect.DeepEqual(got, idKeep) && len(ids) > 0 {
			t.Errorf("%s: batch of %d ids differs from the vector", name, len(ids))
		}
		got, err := view.KeepMaskKeys(keyStrs)
		if err != nil || (len(keyStrs) > 0 && !reflect.DeepEqual(got, keyKeep)) {
			t.Errorf("%s: batch of %d keys differs from the vector (%v)", name, len(keyStrs), err)
		}
		// Ids and keys mixed in one batch, as FilterRecalled takes them.
		all := append(append([]uint64(nil), idHashes...), keys...)
		want := append(append([]bool(nil), idKeep...), keyKeep...)
		if got := view.KeepMaskHashes(all); len(all) > 0 && !reflect.DeepEqual(got, want) {
			t.Errorf("%s: mixed batch differs from the vector", name)
		}
	}
	return checked
}

func TestFormat2AllVectorsArePresent(t *testing.T) {
	got := names(loadVectors(t, testdata(t)))
	want := []string{"empty", "max_geometry", "mixed", "multi_slice", "run_extremes", "string_keys", "tiny"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("vectors %v, want %v", got, want)
	}
}

func TestFormat2HeadersAndTables(t *testing.T) {
	for name, v := range loadVectors(t, testdata(t)) {
		view, err := Parse(v.data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(v.data) != v.FilterSize || view.FormatVersion != 2 || v.FormatVersion != 2 {
			t.Errorf("%s: size %d format %d", name, len(v.data), view.FormatVersion)
		}
		if view.Version() != v.Version || view.FPRateTarget != v.FPRateTarget || view.SliceSpanMs != v.SliceSpanMs {
			t.Errorf("%s: version %s target %v span %d", name, view.Version(), view.FPRateTarget, view.SliceSpanMs)
		}
		if len(view.Slices) != len(v.Slices) {
			t.Fatalf("%s: %d slices, want %d", name, len(view.Slices), len(v.Slices))
		}
		for i, want := range v.Slices {
			s := view.Slices[i]
			if s.StartMs != want.StartMs || s.EndMs != want.EndMs || len(s.Segments) != len(want.BloomSegments) || len(s.Runs) != len(want.Runs) {
				t.Fatalf("%s slice %d: %+v", name, i, s)
			}
			for j, w := range want.BloomSegments {
				if s.Segments[j].NumBlocks != w.NumBlocks || s.Segments[j].K != w.K {
					t.Errorf("%s slice %d segment %d: %+v, want %+v", name, i, j, s.Segments[j], w)
				}
			}
			for j, w := range want.Runs {
				r := s.Runs[j]
				if r.Precision != w.Precision || r.Universe != w.Universe || r.RiceK != w.RiceK || r.Count != w.Count || r.PayloadBytes != w.PayloadBytes {
					t.Errorf("%s slice %d run %d: %+v, want %+v", name, i, j, r, w)
				}
			}
		}
	}
}

func TestFormat2EveryCandidateAnswer(t *testing.T) {
	if n := checkAnswers(t, loadVectors(t, testdata(t))); n <= 7000 {
		t.Fatalf("checked only %d candidates", n)
	}
}

func TestEveryTruncationIsRejected(t *testing.T) {
	vs := loadVectors(t, testdata(t))
	for _, name := range []string{"mixed", "string_keys", "run_extremes"} {
		data := vs[name].data
		for n := 0; n < len(data); n++ {
			if _, err := Parse(data[:n]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s truncated to %d bytes: %v", name, n, err)
			}
		}
	}
}

func TestBitFlipsAreRejected(t *testing.T) {
	vs := loadVectors(t, testdata(t))
	for _, name := range []string{"tiny", "run_extremes"} {
		data := vs[name].data
		for i := range data {
			b := append([]byte(nil), data...)
			b[i] ^= 1 << (i % 8)
			if _, err := Parse(b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s with byte %d flipped: %v", name, i, err)
			}
		}
	}
}

func TestStructuralErrorsBehindAValidChecksum(t *testing.T) {
	// tiny: header 24 bytes, slice at 24 (start, G, R), run length at 34,
	// run at 38: b, k, n (u32), U - 1 (u32), payload.
	good := loadVectors(t, testdata(t))["tiny"].data
	cases := map[string][]byte{
		"version 3":               put(good, 4, uint16(3)),
		"algorithm":               put(good, 6, uint8(2)),
		"9 slices":                put(good, 7, uint8(9)),
		"slice count beyond data": put(good, 7, uint8(2)),
		"no slices but data":      put(good, 7, uint8(0)),
		"fp target 0.6":           put(good, 8, 0.6),
		"fp target nan":           put(good, 8, math.NaN()),
		"span 999":                put(good, 16, int64(999)),
		"start not a multiple":    put(good, 24, int64(1795392000001)),
		"negative start":          put(good, 24, int64(-432000000)),
		"empty slice":             put(good, 33, uint8(0)),
		"segment without blocks":  put(good, 32, uint8(1)),
		"run length beyond data":  put(good, 34, uint32(1000)),
		"run length one short":    put(good, 34, uint32(18)),
		"run length below header": put(good, 34, uint32(9)),
		"precision 0":             put(good, 38, uint8(0)),
		"precision 33":            put(good, 38, uint8(33)),
		"Rice k off by one":       put(good, 39, uint8(15)),
		"Rice k 32":               put(good, 39, uint8(32)),
		"count 0":                 put(good, 40, uint32(0)),
		"count + 1":               put(good, 40, uint32(5)),
		"universe 1":              put(good, 44, uint32(0)),
		"universe off by one":     put(good, 44, uint32(1<<19)),
	}
	for name, b := range cases {
		if _, err := Parse(reseal(b)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
	if v, err := Parse(reseal(good)); err != nil || len(v.Runs()) != 1 {
		t.Fatalf("resealed tiny: %v", err)
	}
	_, err := Parse(reseal(append([]byte("EXPF\x03\x00"), good[6:]...)))
	if err == nil || !strings.Contains(err.Error(), "versions 1 and 2") || !strings.Contains(err.Error(), "FilterRecalled") {
		t.Errorf("unknown version: %v", err)
	}
}

// Bytes that break two rules get the error of the rule checked first, as
// the C++ and Python decoders (the same cases).
func TestChecksRunInTheSpecifiedOrder(t *testing.T) {
	good := loadVectors(t, testdata(t))["tiny"].data
	smallU := put(good, 44, uint32(100000-1)) // f_0 reaches U
	insert := func(b []byte) []byte {         // one zero byte before the checksum
		return append(append(append([]byte(nil), b[:57]...), 0), b[57:]...)
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"truncated before fingerprint range", reseal(put(smallU, 56, uint8(0x16))), "truncated in code 3"},
		{"bytes after the codes before fingerprint range", reseal(put(insert(smallU), 34, uint32(20))), "after its last code"},
		{"checksum before slice count", put(good, 7, uint8(9)), "checksum mismatch"},
		{"version before length", append([]byte("EXPF\x03\x00"), good[6:20]...), "unsupported format version 3"},
		{"start before counts", reseal(put(put(good, 24, int64(1795392000001)), 32, uint8(9))), "not a non-negative multiple"},
		{"run before trailing bytes", reseal(put(insert(good), 38, uint8(33))), "precision 33"},
		{"fingerprint range", reseal(smallU), "reaches the universe"},
	}
	for _, c := range cases {
		_, err := Parse(c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestRunPayloadLimitIsCheckedBeforeThePayload(t *testing.T) {
	// b = 32, k = 0, n = 1, U = 2^32: only the declared length differs; the
	// limit is checked before a payload byte is read.
	header := []byte{32, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}
	run := header
	if _, err := decodeRun(run, 10+maxRunPayloadSize, 0); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("payload of 2^29 - 8 bytes: %v", err)
	}
	if _, err := decodeRun(run, 10+maxRunPayloadSize-1, 0); err == nil || !strings.Contains(err.Error(), "truncated in code 0") {
		t.Errorf("payload of 2^29 - 9 bytes: %v", err)
	}
	run = append([]byte(nil), header...)
	run[2] = 0 // n = 0: the limit comes first
	if _, err := decodeRun(run, 10+maxRunPayloadSize, 0); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("n = 0 with a too large payload: %v", err)
	}
}

func TestTheEmptyKeyIsRejectedNotAnswered(t *testing.T) {
	view, err := Parse(loadVectors(t, testdata(t))["string_keys"].data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := view.MayContainKey(""); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("MayContainKey(\"\"): %v", err)
	}
	if _, err := view.KeepMaskKeys([]string{"video:1", ""}); !errors.Is(err, ErrEmptyKey) || !strings.Contains(err.Error(), "keys[1]") {
		t.Errorf("KeepMaskKeys: %v", err)
	}
}

func TestEstimatedFPRateIsTheRunsShare(t *testing.T) {
	view, err := Parse(loadVectors(t, testdata(t))["multi_slice"].data)
	if err != nil {
		t.Fatal(err)
	}
	clean := 1.0
	for _, r := range view.Runs() {
		clean *= 1 - float64(r.Count)/float64(r.Universe)
	}
	if got := view.EstimatedFPRate(); math.Abs(got-(1-clean)) > 1e-12 || got >= view.FPRateTarget {
		t.Errorf("estimate %v, want %v below %v", got, 1-clean, view.FPRateTarget)
	}
}

func TestWorkedExampleFingerprints(t *testing.T) {
	view, err := Parse(loadVectors(t, testdata(t))["tiny"].data)
	if err != nil {
		t.Fatal(err)
	}
	if got := view.Runs()[0].Fingerprints(); !reflect.DeepEqual(got, []uint32{108897, 151653, 223907, 417358}) {
		t.Errorf("fingerprints %v", got)
	}
	if !view.MayContainID(1) || view.MayContainID(4) {
		t.Error("ids 1 and 4")
	}
}

func TestFormat1Vectors(t *testing.T) {
	vs := loadVectors(t, filepath.Join(testdata(t), "format1"))
	if got := names(vs); !reflect.DeepEqual(got, []string{"empty", "max_geometry", "multi_slice", "string_keys", "tiny"}) {
		t.Fatalf("format 1 vectors %v", got)
	}
	for name, v := range vs {
		view, err := Parse(v.data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if view.FormatVersion != 1 || view.Version() != v.Version {
			t.Errorf("%s: format %d version %s", name, view.FormatVersion, view.Version())
		}
		segs := view.Segments()
		if len(segs) != len(v.Segments) {
			t.Fatalf("%s: %d segments, want %d", name, len(segs), len(v.Segments))
		}
		for i, w := range v.Segments {
			s := segs[i]
			if s.StartMs != w.StartMs || s.EndMs != w.EndMs || s.NumBlocks != w.NumBlocks || s.ItemCount != w.ItemCount || s.K != w.K || s.Level != w.Level {
				t.Errorf("%s segment %d: %+v, want %+v", name, i, s, w)
			}
		}
	}
	if n := checkAnswers(t, vs); n <= 3000 {
		t.Fatalf("checked only %d format-1 candidates", n)
	}
	good := vs["tiny"].data
	cases := map[string][]byte{
		"version 3":         put(good, 4, uint16(3)),
		"header size":       put(good, 6, uint16(40)),
		"segment count":     put(good, 16, uint32(65)),
		"count beyond data": put(good, 16, uint32(2)),
		"algorithm":         put(good, 20, uint8(2)),
		"block size":        put(good, 21, uint8(7)),
		"fp target 0.6":     put(good, 24, 0.6),
		"zero blocks":       put(good, 48, uint32(0)),
		"huge blocks":       put(good, 48, uint32(1<<26+1)),
		"zero probes":       put(good, 56, uint8(0)),
		"17 probes":         put(good, 56, uint8(17)),
		"level 1 first":     put(good, 57, uint8(1)),
		"ends before start": put(good, 40, int64(0)),
		"ends at start":     put(good, 40, int64(1795392000000)),
	}
	for name, b := range cases {
		if _, err := Parse(reseal(b)); !errors.Is(err, ErrMalformed) {
			t.Errorf("format 1 %s: accepted (%v)", name, err)
		}
	}
	multi := vs["multi_slice"].data
	view, _ := Parse(multi)
	segs := view.Segments()
	grown := -1
	for i := 0; i+1 < len(segs); i++ {
		if segs[i+1].Level == 1 {
			grown = i
			break
		}
	}
	if grown < 0 {
		t.Fatal("multi_slice has no grown slice")
	}
	at := 32 + 32*(grown+1)
	span := view.SliceSpanMs
	for name, b := range map[string][]byte{
		"level skipped":     put(multi, at+25, uint8(2)),
		"slice end differs": put(multi, at+8, segs[grown].EndMs+1),
		"span differs":      put(multi, 32+8, segs[0].EndMs+span),
		"out of order":      put(put(multi, 32, segs[0].StartMs+100*span), 40, segs[0].EndMs+100*span),
	} {
		if _, err := Parse(reseal(b)); !errors.Is(err, ErrMalformed) {
			t.Errorf("format 1 %s: accepted (%v)", name, err)
		}
	}
}
