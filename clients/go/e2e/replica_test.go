package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"testing"
	"time"

	"exposurefilter/efclient"
	"exposurefilter/replica"
	pb "exposurefilter/v1"
)

// Mode B+ (the Go replica on one Session stream) against the real server's
// FilterRecalled, while the users checked are written: every candidate of
// every check compared, ids and keys.

var histories = []int{0, 1, 5, 20, 50, 100, 200, 400, 700, 1000, 1500, 2000, 3000}

const (
	replicaUsers  = 3 * 13
	replicaRounds = 240
	perCheck      = 440
)

type history struct {
	ids  []uint64
	keys []string
}

type agreement struct {
	total, removed, exposed int
	// Candidates the replica keeps and the server removes: never exposed,
	// false positives of fingerprints recorded since the snapshot.
	keptFP int
	// Anything else the two answered differently (must stay 0).
	otherDiffer, falseNegatives int
}

func record(t *testing.T, c *efclient.Client, user string, ids []uint64, keys []string, eventMs int64) {
	t.Helper()
	_, err := c.RecordExposure(context.Background(), &pb.RecordExposureRequest{Surface: "homefeed",
		Exposures: []*pb.Exposure{{UserId: user, EventTimeMs: eventMs, ItemIds: ids, ItemKeys: keys}}})
	if err != nil {
		t.Fatal(err)
	}
}

func populate(t *testing.T, c *efclient.Client, prefix string, rng *rand.Rand) map[string]*history {
	now := time.Now().UnixMilli()
	out := map[string]*history{}
	for u := 0; u < replicaUsers; u++ {
		user := fmt.Sprintf("%s-%d", prefix, u)
		n := histories[u%len(histories)]
		h := &history{}
		for i := 0; i < n-n/10; i++ {
			h.ids = append(h.ids, rng.Uint64())
		}
		for i := 0; i < n/10; i++ {
			h.keys = append(h.keys, fmt.Sprintf("item:%d:%d", u, rng.Int63n(1<<40)))
		}
		for start := 0; start < n; start += 500 {
			ids := h.ids[min(start, len(h.ids)):min(start+500, len(h.ids))]
			keys := h.keys[min(start/10, len(h.keys)):min((start+500)/10, len(h.keys))]
			record(t, c, user, ids, keys, now-rng.Int63n(29*dayMs))
		}
		out[user] = h
	}
	return out
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// interleave writes replicaRounds times to random users; after each
// acknowledgement, syncs pings answered, then the user's candidates (the
// items just written, older exposures, fresh items) checked by the replica
// and by FilterRecalled.
func interleave(t *testing.T, c *efclient.Client, r *replica.Replica, rng *rand.Rand, users map[string]*history, syncs int) agreement {
	ctx := context.Background()
	var names []string
	for u := range users {
		names = append(names, u)
	}
	sort.Strings(names)
	var a agreement
	for round := 0; round < replicaRounds; round++ {
		user := names[rng.Intn(len(names))]
		h := users[user]
		var newIDs []uint64
		for i := rng.Intn(20) + 1; i > 0; i-- {
			newIDs = append(newIDs, rng.Uint64())
		}
		var newKeys []string
		if rng.Float64() < 0.3 {
			newKeys = append(newKeys, fmt.Sprintf("new:%d", rng.Int63n(1<<40)))
		}
		when := int64(0)
		if rng.Float64() >= 2.0/3 {
			when = time.Now().UnixMilli() - rng.Int63n(20*dayMs)
		}
		record(t, c, user, newIDs, newKeys, when)
		h.ids = append(h.ids, newIDs...)
		h.keys = append(h.keys, newKeys...)
		for i := 0; i < syncs; i++ {
			if err := r.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]bool{}
		for _, id := range h.ids {
			seen[fmt.Sprint("i", id)] = true
		}
		for _, k := range h.keys {
			seen["k"+k] = true
		}
		ids := append([]uint64(nil), newIDs...)
		keys := append([]string(nil), newKeys...)
		for len(ids)+len(keys) < perCheck {
			switch x := rng.Float64(); {
			case len(h.ids) > 0 && x < 0.3:
				ids = append(ids, h.ids[rng.Intn(len(h.ids))])
			case len(h.keys) > 0 && x < 0.35:
				keys = append(keys, h.keys[rng.Intn(len(h.keys))])
			case x < 0.45:
				keys = append(keys, fmt.Sprintf("fresh:%d", rng.Int63n(1<<48)))
			default:
				ids = append(ids, rng.Uint64())
			}
		}
		local, err := r.Check(ctx, "homefeed", user, ids, keys)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.FilterRecalled(ctx, &pb.FilterRecalledRequest{Surface: "homefeed", UserId: user,
			CandidateIds: ids, CandidateKeys: keys, Mode: pb.ResultMode_KEEP_MASK})
		if err != nil {
			t.Fatal(err)
		}
		for i := range local {
			name := ""
			if i < len(ids) {
				name = fmt.Sprint("i", ids[i])
			} else {
				name = "k" + keys[i-len(ids)]
			}
			serverKeeps := maskBit(resp.KeepMask, i)
			a.total++
			if !serverKeeps {
				a.removed++
			}
			if seen[name] {
				a.exposed++
				if local[i] {
					a.falseNegatives++
				}
			}
			if serverKeeps != local[i] {
				if !serverKeeps && !seen[name] {
					a.keptFP++
				} else {
					a.otherDiffer++
				}
			}
		}
	}
	return a
}

func runAgreement(t *testing.T, what, prefix string, seed int64, opts replica.Options, syncs int) (agreement, replica.Stats) {
	conn, err := efclient.Dial(env(t, "EF_GO_E2E_SERVER_ADDR"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := efclient.NewClient(conn)
	c.Timeout = 60 * time.Second
	rng := rand.New(rand.NewSource(seed))
	users := populate(t, c, prefix, rng)
	opts.Timeout = 60 * time.Second // generous: nothing is timed here
	r, err := replica.New(conn, opts)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	a := interleave(t, c, r, rng, users, syncs)
	st := r.Stats()
	r.Close()
	fmt.Printf("go replica %s: %d/%d candidates agree across %d users, %d writes (%d removed, %d of them exposed); "+
		"%d kept by the replica and removed by the server as false positives of fingerprints recorded since the snapshot, "+
		"%d other differences, %d false negatives; checks: %d local, %d stream, %d unary (hit ratio %.3f); "+
		"%d snapshots, %d pushes (%d items), %d compactions, %d gaps, %d resyncs, %d bytes held; %.1f s\n",
		what, a.total-a.keptFP-a.otherDiffer, a.total, replicaUsers, replicaRounds, a.removed, a.exposed,
		a.keptFP, a.otherDiffer, a.falseNegatives, st.LocalChecks, st.StreamChecks, st.UnaryChecks, st.HitRatio,
		st.Snapshots, st.Pushes, st.PushedItems, st.Compactions, st.Gaps, st.Resyncs, st.BytesHeld,
		time.Since(started).Seconds())
	if a.falseNegatives != 0 || a.otherDiffer != 0 {
		t.Fatalf("%d false negatives, %d differences the spec does not allow", a.falseNegatives, a.otherDiffer)
	}
	if a.total < 100000 || a.exposed < 20000 || a.total-a.removed < 50000 {
		t.Fatalf("too few candidates: %+v", a)
	}
	// Every user's first check waits for its snapshot: nearly all local.
	if st.HitRatio < 0.9 || st.Pushes < replicaRounds/2 || st.Gaps != 0 || st.Resyncs != 0 {
		t.Fatalf("stats %+v", st)
	}
	return a, st
}

// Every push compacted (CompactAfterItems 1): the replica re-subscribes as
// it applies the push, before the first sync's pong, so the second sync's
// pong follows the new snapshot and the answers are identical.
func TestReplicaAgreementCompacted(t *testing.T) {
	a, st := runAgreement(t, "agreement, every push compacted", "go-agree", 20261128,
		replica.Options{CompactAfterItems: 1}, 2)
	if a.keptFP != 0 || st.Compactions < st.Pushes/2 {
		t.Fatalf("agreement %+v, stats %+v", a, st)
	}
}

// Pushed items held (the default): the answers may differ only the way the
// spec allows, and that FP mass is far below delta.
func TestReplicaAgreementPushedItemsHeld(t *testing.T) {
	a, st := runAgreement(t, "agreement, pushed items held", "go-pushed", 20261129, replica.Options{}, 1)
	if float64(a.keptFP) >= 0.001*float64(a.total-a.removed) || st.Compactions != 0 {
		t.Fatalf("agreement %+v, stats %+v", a, st)
	}
}

// A check right after a write's acknowledgement, with no sync, removes the
// items written once the staleness bound has passed (in practice sooner:
// from the push).
func TestReplicaPushedExposuresSeen(t *testing.T) {
	conn, err := efclient.Dial(env(t, "EF_GO_E2E_SERVER_ADDR"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := efclient.NewClient(conn)
	c.Timeout = 60 * time.Second
	r, err := replica.New(conn, replica.Options{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	const bound = 100 * time.Millisecond // the default MaxStaleness
	rng := rand.New(rand.NewSource(7))
	var users []string
	for u := 0; u < 10; u++ {
		users = append(users, fmt.Sprintf("go-seen-%d", u))
		if _, err := r.Check(ctx, "homefeed", users[u], []uint64{1}, nil); err != nil {
			t.Fatal(err)
		}
	}
	const writes = 100
	var firstLocal []time.Duration
	lateMisses := 0
	for w := 0; w < writes; w++ {
		user := users[rng.Intn(len(users))]
		var items []uint64
		for i := rng.Intn(20) + 1; i > 0; i-- {
			items = append(items, rng.Uint64())
		}
		record(t, c, user, items, nil, 0)
		acked := time.Now()
		for {
			started := time.Now()
			keep, path, err := r.CheckPath(ctx, "homefeed", user, items, nil)
			if err != nil {
				t.Fatal(err)
			}
			anyKept := false
			for _, k := range keep {
				anyKept = anyKept || k
			}
			if anyKept && started.Sub(acked) >= bound {
				lateMisses++
			}
			if path == replica.Local && !anyKept {
				firstLocal = append(firstLocal, started.Sub(acked))
				break
			}
			if started.Sub(acked) > 30*time.Second {
				t.Fatal("never filtered")
			}
			time.Sleep(time.Millisecond)
		}
	}
	st := r.Stats()
	sort.Slice(firstLocal, func(i, j int) bool { return firstLocal[i] < firstLocal[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Printf("go replica pushed exposures seen: %d writes; first local check removing them at p50 %.2f ms, max %.2f ms after the ack (bound %.0f ms); %d local checks, %d mode A\n",
		writes, ms(firstLocal[len(firstLocal)/2]), ms(firstLocal[len(firstLocal)-1]), ms(bound),
		st.LocalChecks, st.StreamChecks+st.UnaryChecks)
	if lateMisses != 0 || len(firstLocal) != writes || st.Pushes != writes {
		t.Fatalf("%d late misses, %d writes seen, stats %+v", lateMisses, len(firstLocal), st)
	}
}
