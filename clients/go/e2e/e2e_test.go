// End-to-end tests of the Go client against the real server binary. They
// are started by tests/e2e/test_go_client.py (ctest e2e_go_client), which
// runs the servers (one plain server; three replicas with R = 2 over
// librdkafka's mock cluster) and passes their addresses in the
// environment; run alone they fail, naming what is missing.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"exposurefilter/efclient"
	pb "exposurefilter/v1"
)

func env(t *testing.T, name string) string {
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run through tests/e2e/test_go_client.py (ctest -R e2e_go_client)", name)
	}
	return v
}

const dayMs = 24 * 3600 * 1000

func maskBit(mask []byte, i int) bool { return mask[i/8]>>(i%8)&1 == 1 }

// Pull mode agrees with server mode: users with 0 to 10,000 exposures
// spread over 29 days, each user's filter pulled through FilterCache and
// decoded by the Go decoder, and every candidate's local answer compared
// with FilterRecalled's (KEEP_MASK), ids and keys.
func TestPullAgreement(t *testing.T) {
	conn, err := efclient.Dial(env(t, "EF_GO_E2E_SERVER_ADDR"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := efclient.NewClient(conn)
	client.Timeout = 60 * time.Second
	cache := efclient.NewFilterCache(client.Getter(), 64<<20)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(20261128))
	now := time.Now().UnixMilli()
	exposures := []int{0, 1, 2, 10, 31, 100, 400, 1000, 2500, 5000, 7500, 10000}
	const candidatesPerUser = 9000
	total, agreed, removed, exposedChecked, runs, sealed := 0, 0, 0, 0, 0, 0
	for u, n := range exposures {
		user := fmt.Sprintf("go-user-%d", u)
		exposed := map[string]bool{}
		var ids []uint64
		var keys []string
		for i := 0; i < n-n/10; i++ {
			ids = append(ids, rng.Uint64())
		}
		for i := 0; i < n/10; i++ {
			keys = append(keys, fmt.Sprintf("item:%d:%d", u, rng.Int63n(1<<40)))
		}
		// Batches of 1,000 at random times in the window: many slices.
		type item struct {
			id  uint64
			key string
		}
		var items []item
		for _, id := range ids {
			items = append(items, item{id: id})
		}
		for _, k := range keys {
			items = append(items, item{key: k})
		}
		rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
		for start := 0; start < len(items); start += 1000 {
			end := start + 1000
			if end > len(items) {
				end = len(items)
			}
			e := &pb.Exposure{UserId: user, EventTimeMs: now - rng.Int63n(29*dayMs)}
			for _, it := range items[start:end] {
				if it.key != "" {
					e.ItemKeys = append(e.ItemKeys, it.key)
				} else {
					e.ItemIds = append(e.ItemIds, it.id)
				}
			}
			if _, err := client.RecordExposure(ctx, &pb.RecordExposureRequest{Surface: "homefeed", Exposures: []*pb.Exposure{e}}); err != nil {
				t.Fatal(err)
			}
		}
		if n >= 100 {
			// One-item writes at "now": older slices go quiet and are
			// sealed (runs re-coded at a universe below 2^b).
			for i := 0; i < 10; i++ {
				id := rng.Uint64()
				ids = append(ids, id)
				if _, err := client.RecordExposure(ctx, &pb.RecordExposureRequest{Surface: "homefeed",
					Exposures: []*pb.Exposure{{UserId: user, EventTimeMs: now, ItemIds: []uint64{id}}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, id := range ids {
			exposed["i"+strconv.FormatUint(id, 10)] = true
		}
		for _, k := range keys {
			exposed["k"+k] = true
		}
		view, err := cache.Get(ctx, "homefeed", user)
		if err != nil {
			t.Fatal(err)
		}
		if view.FormatVersion != 2 || len(view.Segments()) != 0 || (len(view.Runs()) > 0) != (n > 0) {
			t.Fatalf("%s: format %d, %d segments, %d runs", user, view.FormatVersion, len(view.Segments()), len(view.Runs()))
		}
		runs += len(view.Runs())
		for _, r := range view.Runs() {
			if r.Universe != 1<<uint(r.Precision) {
				sealed++
			}
		}
		var candIDs []uint64
		var candKeys []string
		for i := 0; i < candidatesPerUser; i++ {
			switch {
			case n > 0 && rng.Float64() < 1.0/3:
				if len(keys) > 0 && rng.Float64() < 0.1 {
					candKeys = append(candKeys, keys[rng.Intn(len(keys))])
				} else {
					candIDs = append(candIDs, ids[rng.Intn(len(ids))])
				}
			case rng.Float64() < 0.1:
				candKeys = append(candKeys, fmt.Sprintf("fresh:%d", rng.Int63n(1<<48)))
			default:
				candIDs = append(candIDs, rng.Uint64())
			}
		}
		server, err := client.FilterRecalled(ctx, &pb.FilterRecalledRequest{Surface: "homefeed", UserId: user,
			CandidateIds: candIDs, CandidateKeys: candKeys, Mode: pb.ResultMode_KEEP_MASK})
		if err != nil {
			t.Fatal(err)
		}
		keepKeys, err := view.KeepMaskKeys(candKeys)
		if err != nil {
			t.Fatal(err)
		}
		local := append(view.KeepMaskIDs(candIDs), keepKeys...)
		localRemoved := 0
		for i := range local {
			serverKeeps := maskBit(server.GetKeepMask(), i)
			total++
			if serverKeeps == local[i] {
				agreed++
			}
			if !serverKeeps {
				removed++
			}
			if !local[i] {
				localRemoved++
			}
			var name string
			if i < len(candIDs) {
				name = "i" + strconv.FormatUint(candIDs[i], 10)
			} else {
				name = "k" + candKeys[i-len(candIDs)]
			}
			if exposed[name] {
				exposedChecked++
				if local[i] {
					t.Errorf("%s: false negative %s", user, name)
				}
			}
		}
		if int(server.GetRemovedCount()) != localRemoved {
			t.Errorf("%s: removed_count %d, local %d", user, server.GetRemovedCount(), localRemoved)
		}
	}
	// Revalidation: unchanged filters are not sent again.
	before := cache.Stats()
	if _, err := cache.Get(ctx, "homefeed", "go-user-11"); err != nil {
		t.Fatal(err)
	}
	after := cache.Stats()
	fmt.Printf("go pull agreement: %d/%d candidates agree across %d users (%d removed, %d of them exposed; %d runs, %d sealed); revalidation not_modified %d -> %d\n",
		agreed, total, len(exposures), removed, exposedChecked, runs, sealed, before.NotModified, after.NotModified)
	if total < 100000 || agreed != total || exposedChecked < 20000 || total-removed < 50000 || sealed == 0 {
		t.Errorf("agreement %d/%d, exposed %d, kept %d, sealed runs %d", agreed, total, exposedChecked, total-removed, sealed)
	}
	if after.NotModified != before.NotModified+1 || after.FullPulls != before.FullPulls {
		t.Errorf("revalidation: %+v -> %+v", before, after)
	}
}

// The examples (examples/go) print what the C++ and Python ones print.
func TestExamples(t *testing.T) {
	addr := env(t, "EF_GO_E2E_SERVER_ADDR")
	bin := env(t, "EF_GO_EXAMPLES_BIN")
	conn, err := efclient.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := efclient.NewClient(conn).RecordExposure(context.Background(), &pb.RecordExposureRequest{
		Surface: "homefeed", Exposures: []*pb.Exposure{{UserId: "go-example", ItemIds: []uint64{101, 102}}}}); err != nil {
		t.Fatal(err)
	}
	run := func(name string) []string {
		out, err := exec.Command(bin+"/"+name, addr, "homefeed", "go-example", "101", "102", "103", "104").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	want := "kept: 103 104"
	if got := run("recall_server_side_filter"); len(got) != 1 || got[0] != want {
		t.Errorf("recall_server_side_filter printed %q", got)
	}
	if got := run("recall_pull_local_check"); strings.Join(got, "|") != want+"|"+want+"|full_pulls=1 not_modified=1" {
		t.Errorf("recall_pull_local_check printed %q", got)
	}
}

// Load through the RoutingClient (R = 2, read-your-writes on) while the
// driver kills one replica and restarts it: no FilterRecalled call may
// fail, every read of a user sees that user's acknowledged writes, writes
// fail only as UNAVAILABLE or DEADLINE_EXCEEDED (the caller is told).
// Prints a JSON summary on its last line.
func TestFailoverLoad(t *testing.T) {
	route := strings.Split(env(t, "EF_GO_E2E_ROUTE"), ",")
	partitions, _ := strconv.Atoi(env(t, "EF_GO_E2E_PARTITIONS"))
	r, _ := strconv.Atoi(env(t, "EF_GO_E2E_REPLICATION_FACTOR"))
	seconds, _ := strconv.ParseFloat(env(t, "EF_GO_E2E_SECONDS"), 64)
	var conns []grpc.ClientConnInterface
	for _, a := range route {
		cc, err := efclient.Dial(a, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		conns = append(conns, cc)
	}
	rc, err := efclient.NewRoutingClient(conns, efclient.RoutingOptions{Partitions: partitions, ReplicationFactor: r,
		Timeout: 3 * time.Second, PerTryTimeout: time.Second, ReadYourWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	type summary struct {
		Reads, ReadFailed, Writes, WriteFailed, RYWChecked, RYWMissed int
		WriteFailedByCode                                             map[string]int
		ReadErrors                                                    []string
		Failovers, ReadsWithOffsets                                   int64
		ReplicaErrors                                                 []int64
	}
	var mu sync.Mutex
	s := summary{WriteFailedByCode: map[string]int{}}
	stop := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			acked := map[string][]uint64{}
			next := uint64(w) << 40
			for i := 0; time.Now().Before(stop); i++ {
				user := fmt.Sprintf("go-failover-%d-%d", w, rng.Intn(100))
				ctx := context.Background()
				if i%4 == 0 {
					next++
					res := rc.RecordExposure(ctx, &pb.RecordExposureRequest{Surface: "homefeed",
						Exposures: []*pb.Exposure{{UserId: user, ItemIds: []uint64{next}}}})
					mu.Lock()
					s.Writes++
					if err := res.Err(); err != nil {
						s.WriteFailed++
						s.WriteFailedByCode[status.Code(errUnwrap(err)).String()]++
					} else {
						acked[user] = append(acked[user], next)
					}
					mu.Unlock()
					continue
				}
				cands := append([]uint64{rng.Uint64()}, acked[user]...)
				resp, err := rc.FilterRecalled(ctx, &pb.FilterRecalledRequest{Surface: "homefeed", UserId: user,
					CandidateIds: cands, Mode: pb.ResultMode_KEEP_MASK})
				mu.Lock()
				s.Reads++
				if err != nil {
					s.ReadFailed++
					if len(s.ReadErrors) < 5 {
						s.ReadErrors = append(s.ReadErrors, err.Error())
					}
				} else {
					for j := 1; j < len(cands); j++ {
						s.RYWChecked++
						if maskBit(resp.GetKeepMask(), j) {
							s.RYWMissed++
						}
					}
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	st := rc.Stats()
	s.Failovers, s.ReadsWithOffsets, s.ReplicaErrors = st.Failovers, st.ReadsWithOffsets, st.ReplicaErrors
	out, _ := json.Marshal(s)
	fmt.Println(string(out))
	if s.ReadFailed != 0 || s.RYWMissed != 0 || s.Reads < 100 {
		t.Errorf("reads %d, failed %d, read-your-writes missed %d of %d: %v", s.Reads, s.ReadFailed, s.RYWMissed, s.RYWChecked, s.ReadErrors)
	}
	for code := range s.WriteFailedByCode {
		if code != "Unavailable" && code != "DeadlineExceeded" {
			t.Errorf("a write failed with %s", code)
		}
	}
}

// errUnwrap returns the innermost error carrying a gRPC status.
func errUnwrap(err error) error {
	for {
		if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
			return err
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}
