package xxh3

import (
	"bufio"
	"fmt"
	"math/rand"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// The reference: Debian's python3-xxhash (the reference C library's
// XXH3_64bits_withSeed), over every length class (0, 1-3, 4-8, 9-16,
// 17-128, 129-240, long: one block, several blocks, partial stripes) and
// the seeds the filter format uses (0 for the checksum, "exposure" for
// items) plus a seed whose halves differ.
const python = `
import sys, xxhash
for line in sys.stdin:
    seed, hexdata = line.split()
    data = b"" if hexdata == "-" else bytes.fromhex(hexdata)
    print(xxhash.xxh3_64_intdigest(data, seed=int(seed)))
`

func TestAgreesWithPythonXxhash(t *testing.T) {
	rng := rand.New(rand.NewSource(20261128))
	seeds := []uint64{0, 0x657275736f707865, 0x0123456789abcdef, 1}
	var lengths []int
	for n := 0; n <= 300; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 1023, 1024, 1025, 2047, 2048, 2049, 4096+17, 10000, 65536+5)
	type tc struct {
		seed uint64
		data []byte
	}
	var cases []tc
	var input strings.Builder
	for _, n := range lengths {
		for _, seed := range seeds {
			data := make([]byte, n)
			rng.Read(data)
			cases = append(cases, tc{seed, data})
			hexdata := fmt.Sprintf("%x", data)
			if n == 0 {
				hexdata = "-"
			}
			fmt.Fprintf(&input, "%d %s\n", seed, hexdata)
		}
	}
	cmd := exec.Command("/usr/bin/python3", "-c", python)
	cmd.Stdin = strings.NewReader(input.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 with xxhash (Debian's python3-xxhash, installed by scripts/setup.sh): %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	i := 0
	for sc.Scan() {
		want, err := strconv.ParseUint(sc.Text(), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		c := cases[i]
		if got := HashSeed(c.data, c.seed); got != want {
			t.Errorf("len %d seed %#x: got %#016x, python3-xxhash %#016x", len(c.data), c.seed, got, want)
		}
		i++
	}
	if i != len(cases) {
		t.Fatalf("python answered %d of %d cases", i, len(cases))
	}
}

func TestWorkedExample(t *testing.T) {
	// docs/filter-format.md, "Worked example": id 1 and key "video:42".
	id := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	if got := HashSeed(id, 0x657275736f707865); got != 0xcbc9ce2019210bb8 {
		t.Errorf("id 1: %#x", got)
	}
	if got := HashSeed([]byte("video:42"), 0x657275736f707865); got != 0x6d5473d75b680149 {
		t.Errorf("key video:42: %#x", got)
	}
}
