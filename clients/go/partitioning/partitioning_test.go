package partitioning

import (
	"bufio"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func testdata(t *testing.T) string {
	dir := os.Getenv("EF_TESTDATA_DIR")
	if dir == "" {
		t.Fatal("set EF_TESTDATA_DIR to tests/testdata (ctest does this)")
	}
	return dir
}

func lines(t *testing.T, path string) [][]string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "" {
			continue
		}
		out = append(out, strings.Split(l, "\t"))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func atoi(t *testing.T, s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestKafkaUtilsTestVectors(t *testing.T) {
	// org.apache.kafka.common.utils.UtilsTest.testMurmur2
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for key, want := range cases {
		if got := Murmur2([]byte(key)); got != want {
			t.Errorf("murmur2(%q) = %d, Kafka says %d", key, got, want)
		}
	}
	// The sign bit is masked, not negated.
	if got := PartitionForKey([]byte("21"), 7); got != 1173551340%7 {
		t.Errorf("partition of \"21\" = %d", got)
	}
}

func TestAgreesWithTheCppVectors(t *testing.T) {
	rows := lines(t, filepath.Join(testdata(t), "partitioning", "murmur2_vectors.tsv"))
	for _, f := range rows {
		var key []byte
		if f[0] != "-" {
			var err error
			if key, err = hex.DecodeString(f[0]); err != nil {
				t.Fatal(err)
			}
		}
		if got := Murmur2(key); int(got) != atoi(t, f[1]) {
			t.Errorf("%s: murmur2 %d, want %s", f[0], got, f[1])
		}
		if got := PartitionForKey(key, 12); got != atoi(t, f[2]) {
			t.Errorf("%s: partition of 12 %d, want %s", f[0], got, f[2])
		}
		if got := PartitionForKey(key, 1000); got != atoi(t, f[3]) {
			t.Errorf("%s: partition of 1000 %d, want %s", f[0], got, f[3])
		}
	}
	if len(rows) != 960 {
		t.Fatalf("checked %d vectors, the file has 960", len(rows))
	}
}

func TestAgreesWithTheCppPlacementVectors(t *testing.T) {
	owners, owned := 0, 0
	for _, f := range lines(t, filepath.Join(testdata(t), "partitioning", "placement_vectors.tsv")) {
		switch f[0] {
		case "owners":
			n, r, p := atoi(t, f[1]), atoi(t, f[2]), atoi(t, f[3])
			var want []int
			for _, o := range strings.Split(f[4], ",") {
				want = append(want, atoi(t, o))
			}
			if got := OwnersOfPartition(p, n, r); !reflect.DeepEqual(got, want) {
				t.Errorf("%v: owners %v", f, got)
			}
			owners++
		case "owned":
			p, n, r, o := atoi(t, f[1]), atoi(t, f[2]), atoi(t, f[3]), atoi(t, f[4])
			var want []int
			if f[5] != "-" {
				for _, x := range strings.Split(f[5], ",") {
					want = append(want, atoi(t, x))
				}
			}
			if got := PartitionsOfReplica(o, p, n, r); !reflect.DeepEqual(got, want) {
				t.Errorf("%v: owned %v", f, got)
			}
			owned++
		default:
			t.Fatalf("unknown row %v", f)
		}
	}
	if owners != 526 || owned != 166 {
		t.Fatalf("checked %d owners and %d owned rows, the file has 526 and 166", owners, owned)
	}
}

func TestWorkedExample(t *testing.T) {
	// docs/scale-out.md, P = 12, N = 3.
	for _, c := range []struct {
		user          string
		murmur        int32
		partition, n3 int
	}{{"alice", 1951417749, 9, 0}, {"bob", -2048144690, 6, 0}, {"user:42", -1493546323, 1, 1}} {
		if got := Murmur2([]byte(c.user)); got != c.murmur {
			t.Errorf("%s: murmur2 %d", c.user, got)
		}
		if got := PartitionForKey([]byte(c.user), 12); got != c.partition {
			t.Errorf("%s: partition %d", c.user, got)
		}
		if got := ReplicaForUser(c.user, 12, 3); got != c.n3 {
			t.Errorf("%s: owner %d", c.user, got)
		}
	}
	if err := CheckLayout(12, 3, 4); err == nil {
		t.Error("R = 4 > N = 3 accepted")
	}
	got := StatefulSetReplicaAddresses("ef", "ef-headless", 50051, 2, "")
	if !reflect.DeepEqual(got, []string{"ef-0.ef-headless:50051", "ef-1.ef-headless:50051"}) {
		t.Error(got)
	}
}
