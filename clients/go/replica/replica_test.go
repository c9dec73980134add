package replica

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"exposurefilter/efclient"
	"exposurefilter/filterview"
	pb "exposurefilter/v1"
)

// The golden transcripts' server clock, and the first snapshot of
// subscribe_and_push.transcript: homefeed/u1 holding ids 1, 2, 3 recorded
// at that instant (slice [t0, t0 + 5 days), retention 30 days).
const t0 = int64(1795392000000)

func testdata(t *testing.T) string {
	dir := os.Getenv("EF_TESTDATA_DIR")
	if dir == "" {
		t.Fatal("EF_TESTDATA_DIR is not set (ctest go_client_unit sets it)")
	}
	return dir
}

func baseSnapshot(t *testing.T) *pb.SessionSnapshot {
	f, err := os.Open(filepath.Join(testdata(t), "session", "subscribe_and_push.transcript"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "< ") {
			m := &pb.SessionResponse{}
			if err := prototext.Unmarshal([]byte(line[2:]), m); err != nil {
				t.Fatal(err)
			}
			return m.GetSnapshot()
		}
	}
	t.Fatal("no snapshot in subscribe_and_push.transcript")
	return nil
}

// scripted is a Session server run by the test: it answers subscribes
// with the base snapshot (unless holding them), pings with its clock,
// filters with "keep everything", unsubscribes as a real server does
// (unsubscribed, nothing when quiet, or an error when refusing them), and
// sends what the test pushes.
type scripted struct {
	pb.UnimplementedExposureFilterServer
	base *pb.SessionSnapshot

	mu                   sync.Mutex
	clockMs              int64
	lagging, silent      bool
	hold, refuse         bool
	refuseUnsubs         bool
	subs                 []*pb.SessionSubscribe
	unsubs               []*pb.SessionUnsubscribe
	filters, unary, pong int
	send                 func(*pb.SessionResponse)
	// The sequence a user's snapshot is at (the base snapshot's unless
	// set): the last push sent, so later pushes follow it.
	sequences map[string]uint64
}

func (s *scripted) snapshot(sub *pb.SessionSubscribe, id uint64) *pb.SessionResponse {
	snap := proto.Clone(s.base).(*pb.SessionSnapshot)
	snap.Surface, snap.UserId, snap.ServerTimeMs = sub.GetSurface(), sub.GetUserId(), s.clockMs
	if seq, ok := s.sequences[sub.GetUserId()]; ok {
		snap.Sequence = seq
	}
	return &pb.SessionResponse{RequestId: id, Kind: &pb.SessionResponse_Snapshot{Snapshot: snap}}
}

func keepAll(n int) []byte {
	mask := make([]byte, (n+7)/8)
	for i := 0; i < n; i++ {
		mask[i/8] |= 1 << (i % 8)
	}
	return mask
}

func (s *scripted) Session(st pb.ExposureFilter_SessionServer) error {
	s.mu.Lock()
	if s.refuse {
		s.mu.Unlock()
		return status.Error(codes.Unavailable, "scripted: refused")
	}
	var sendMu sync.Mutex
	send := func(m *pb.SessionResponse) {
		sendMu.Lock()
		defer sendMu.Unlock()
		_ = st.Send(m)
	}
	s.send = send
	s.mu.Unlock()
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		var resp *pb.SessionResponse
		s.mu.Lock()
		switch k := req.Kind.(type) {
		case *pb.SessionRequest_Subscribe:
			s.subs = append(s.subs, k.Subscribe)
			if !s.hold {
				resp = s.snapshot(k.Subscribe, req.RequestId)
			}
		case *pb.SessionRequest_Ping:
			if !s.silent {
				s.pong++
				resp = &pb.SessionResponse{RequestId: req.RequestId, Kind: &pb.SessionResponse_Pong{
					Pong: &pb.SessionPong{ServerTimeMs: s.clockMs, Lagging: s.lagging}}}
			}
		case *pb.SessionRequest_Filter:
			s.filters++
			n := len(k.Filter.CandidateIds) + len(k.Filter.CandidateKeys)
			resp = &pb.SessionResponse{RequestId: req.RequestId, Kind: &pb.SessionResponse_Filter{
				Filter: &pb.FilterRecalledResponse{KeepMask: keepAll(n)}}}
		case *pb.SessionRequest_Unsubscribe:
			s.unsubs = append(s.unsubs, k.Unsubscribe)
			switch {
			case s.refuseUnsubs:
				resp = &pb.SessionResponse{RequestId: req.RequestId, Kind: &pb.SessionResponse_Error{
					Error: &pb.SessionError{Code: int32(codes.InvalidArgument), Message: "unsubscribe.user_id: scripted refusal"}}}
			case !k.Unsubscribe.Quiet:
				resp = &pb.SessionResponse{RequestId: req.RequestId, Kind: &pb.SessionResponse_Unsubscribed{
					Unsubscribed: &pb.SessionUnsubscribed{Surface: k.Unsubscribe.Surface, UserId: k.Unsubscribe.UserId,
						Reason: pb.SessionUnsubscribed_REQUESTED}}}
			}
		}
		s.mu.Unlock()
		if resp != nil {
			send(resp)
		}
	}
}

func (s *scripted) FilterRecalled(ctx context.Context, req *pb.FilterRecalledRequest) (*pb.FilterRecalledResponse, error) {
	s.mu.Lock()
	s.unary++
	s.mu.Unlock()
	return &pb.FilterRecalledResponse{KeepMask: keepAll(len(req.CandidateIds) + len(req.CandidateKeys))}, nil
}

// push sends m on the current stream, as the server's own message.
func (s *scripted) push(m *pb.SessionResponse) {
	s.mu.Lock()
	send := s.send
	s.mu.Unlock()
	send(m)
}

func (s *scripted) set(f func(s *scripted)) {
	s.mu.Lock()
	f(s)
	s.mu.Unlock()
}

func (s *scripted) get(f func(s *scripted)) { s.set(f) }

func start(t *testing.T, opts Options, setup func(s *scripted)) (*scripted, *Replica) {
	s := &scripted{base: baseSnapshot(t), clockMs: t0}
	if setup != nil {
		setup(s)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterExposureFilterServer(srv, s)
	go srv.Serve(lis)
	conn, err := efclient.Dial(lis.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(conn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		conn.Close()
		srv.Stop()
	})
	return s, r
}

func push(user string, seq uint64, eventMs int64, ids ...uint64) *pb.SessionResponse {
	p := &pb.SessionPush{Surface: "homefeed", UserId: user, Sequence: seq, EventTimeMs: eventMs}
	for _, id := range ids {
		p.ItemHashes = append(p.ItemHashes, filterview.HashID(id))
	}
	return &pb.SessionResponse{Kind: &pb.SessionResponse_Push{Push: p}}
}

var ctx = context.Background()

func check(t *testing.T, r *Replica, user string, ids []uint64, want []bool, path Path) {
	t.Helper()
	keep, p, err := r.CheckPath(ctx, "homefeed", user, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p != path {
		t.Fatalf("check of %s answered by %v, want %v (stats %+v)", user, p, path, r.Stats())
	}
	for i := range want {
		if keep[i] != want[i] {
			t.Fatalf("check of %s: keep %v, want %v", user, keep, want)
		}
	}
}

func sync_(t *testing.T, r *Replica) {
	t.Helper()
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

var ids = []uint64{1, 2, 3, 4, 100}

// relaxed: a staleness bound the tests not about staleness never reach,
// even on a loaded machine.
var relaxed = Options{MaxStaleness: 5 * time.Second}

func TestFirstCheckWaitsForTheSnapshotThenPushesApply(t *testing.T) {
	s, r := start(t, relaxed, nil)
	check(t, r, "u1", ids, []bool{false, false, false, true, true}, Local)
	s.push(push("u1", 1, t0, 4))
	sync_(t, r)
	check(t, r, "u1", ids, []bool{false, false, false, false, true}, Local)
	// A push at or below the sequence held is ignored.
	s.push(push("u1", 1, t0, 100))
	sync_(t, r)
	check(t, r, "u1", ids, []bool{false, false, false, false, true}, Local)
	st := r.Stats()
	if st.Snapshots != 1 || st.Pushes != 1 || st.PushedItems != 1 || st.LocalChecks != 3 || st.HitRatio != 1 {
		t.Fatalf("stats %+v", st)
	}
	if st.Staleness < 0 || st.Staleness > time.Second || st.UsersHeld != 1 || st.BytesHeld <= 0 {
		t.Fatalf("stats %+v", st)
	}
	if _, _, err := r.CheckPath(ctx, "homefeed", "u1", nil, []string{"a", ""}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty key: %v", err)
	}
}

func TestGapResubscribesWithTheVersionHeld(t *testing.T) {
	s, r := start(t, relaxed, nil)
	check(t, r, "u1", ids, []bool{false, false, false, true, true}, Local)
	s.set(func(s *scripted) { s.hold = true })
	s.push(push("u1", 2, t0, 4)) // sequence 1 never came
	sync_(t, r)
	check(t, r, "u1", ids, []bool{true, true, true, true, true}, Stream)
	var subs []*pb.SessionSubscribe
	s.get(func(s *scripted) { subs = s.subs })
	if len(subs) != 2 || subs[1].IfVersion != s.base.Version {
		t.Fatalf("subscribes %v, want a second one with if_version %q", subs, s.base.Version)
	}
	if st := r.Stats(); st.Gaps != 1 || st.NotSynced != 1 || st.StreamChecks != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The server's answer: not_modified at sequence 2; pushes go on at 3.
	snap := s.snapshot(subs[1], 0)
	snap.GetSnapshot().Filter, snap.GetSnapshot().NotModified, snap.GetSnapshot().Sequence = nil, true, 2
	s.push(snap)
	s.push(push("u1", 3, t0, 100))
	sync_(t, r)
	check(t, r, "u1", ids, []bool{false, false, false, true, false}, Local)
	if st := r.Stats(); st.NotModified != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestResyncResetAndIdleLeaveTheLocalPath(t *testing.T) {
	s, r := start(t, relaxed, nil)
	check(t, r, "u1", ids, []bool{false, false, false, true, true}, Local)
	s.push(&pb.SessionResponse{Kind: &pb.SessionResponse_Resync{Resync: &pb.SessionResync{Reason: pb.SessionResync_QUEUE_FULL}}})
	sync_(t, r)
	check(t, r, "u1", ids, nil, Stream)
	// The server's own snapshot (request_id 0) syncs it again.
	s.push(s.snapshot(&pb.SessionSubscribe{Surface: "homefeed", UserId: "u1"}, 0))
	sync_(t, r)
	check(t, r, "u1", ids, []bool{false, false, false, true, true}, Local)
	// A reset: the server now keeps everything.
	s.push(&pb.SessionResponse{Kind: &pb.SessionResponse_Push{Push: &pb.SessionPush{Surface: "homefeed", UserId: "u1", Sequence: 1, Reset_: true}}})
	sync_(t, r)
	check(t, r, "u1", ids, []bool{true, true, true, true, true}, Local)
	// An expired lease: not answered locally, subscribed again next check.
	s.set(func(s *scripted) { s.hold = true })
	s.push(&pb.SessionResponse{Kind: &pb.SessionResponse_Unsubscribed{Unsubscribed: &pb.SessionUnsubscribed{
		Surface: "homefeed", UserId: "u1", Reason: pb.SessionUnsubscribed_IDLE}}})
	sync_(t, r)
	check(t, r, "u1", ids, nil, Stream)
	st := r.Stats()
	if st.Resyncs != 1 || st.Resets != 1 || st.Expired != 1 || st.Snapshots != 2 {
		t.Fatalf("stats %+v", st)
	}
	var n int
	s.get(func(s *scripted) { n = len(s.subs) })
	if n != 2 {
		t.Fatalf("%d subscribes, want 2 (the first and the one after the lease ran out)", n)
	}
}

// Slices age by the server's clock: live while it cannot have reached
// their expiry, mode A while it may have, dropped once a pong shows it
// past.
func TestAgingByTheServersClock(t *testing.T) {
	s, r := start(t, relaxed, nil)
	check(t, r, "u1", ids, []bool{false, false, false, true, true}, Local)
	span, retention := s.base.SliceSpanMs, s.base.RetentionMs
	expiry := t0 + span + retention // the slice of ids 1, 2, 3
	s.set(func(s *scripted) { s.clockMs = expiry - 5000 })
	sync_(t, r)
	check(t, r, "u1", ids, []bool{false, false, false, true, true}, Local)
	s.set(func(s *scripted) { s.clockMs = expiry - 1 })
	sync_(t, r)
	check(t, r, "u1", ids, nil, Stream)
	if st := r.Stats(); st.Aging != 1 {
		t.Fatalf("stats %+v", st)
	}
	s.set(func(s *scripted) { s.clockMs = expiry })
	sync_(t, r)
	check(t, r, "u1", ids, []bool{true, true, true, true, true}, Local)
	// A pushed item ages the same way, in its own slice.
	s.push(push("u1", 1, expiry-1000, 4)) // slice ending at expiry - 1000 + ... (aligned)
	sync_(t, r)
	check(t, r, "u1", ids, []bool{true, true, true, false, true}, Local)
	pushedExpiry := ((expiry-1000)/span+1)*span + retention
	s.set(func(s *scripted) { s.clockMs = pushedExpiry })
	sync_(t, r)
	check(t, r, "u1", ids, []bool{true, true, true, true, true}, Local)
}

func TestStaleOrLaggingServerIsAnsweredByModeA(t *testing.T) {
	s, r := start(t, Options{MaxStaleness: 300 * time.Millisecond}, nil)
	check(t, r, "u1", ids, []bool{false, false, false, true, true}, Local)
	s.set(func(s *scripted) { s.silent = true })
	time.Sleep(400 * time.Millisecond)
	check(t, r, "u1", ids, nil, Stream)
	s.set(func(s *scripted) { s.silent = false })
	sync_(t, r)
	check(t, r, "u1", ids, []bool{false, false, false, true, true}, Local)
	s.set(func(s *scripted) { s.lagging = true })
	sync_(t, r)
	check(t, r, "u1", ids, nil, Stream)
	st := r.Stats()
	if st.Stale != 2 || st.StreamChecks != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestStreamDownIsAnsweredByTheUnaryCall(t *testing.T) {
	s, r := start(t, relaxed, func(s *scripted) { s.refuse = true })
	check(t, r, "u1", ids, []bool{true, true, true, true, true}, Unary)
	var unary int
	s.get(func(s *scripted) { unary = s.unary })
	if st := r.Stats(); unary != 1 || st.UnaryChecks != 1 {
		t.Fatalf("unary %d, stats %+v", unary, st)
	}
	// Once the server takes streams, the replica reconnects on its own.
	s.set(func(s *scripted) { s.refuse = false })
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, p, err := r.CheckPath(ctx, "homefeed", "u1", ids, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p == Local {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not local again after 5 s: %+v", r.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBoundedByBytesLeastRecentlyCheckedOut(t *testing.T) {
	const max = 1 << 20
	s, r := start(t, Options{MaxBytes: max, CompactAfterItems: 1 << 30, MaxStaleness: relaxed.MaxStaleness}, nil)
	many := func(from, n uint64) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = 1000 + from + uint64(i)
		}
		return out
	}
	check(t, r, "a", ids, []bool{false, false, false, true, true}, Local)
	s.push(push("a", 1, t0, many(0, 15000)...))
	check(t, r, "b", ids, []bool{false, false, false, true, true}, Local)
	sync_(t, r)
	if st := r.Stats(); st.Evictions != 0 || st.UsersHeld != 2 {
		t.Fatalf("stats %+v", st)
	}
	s.push(push("b", 1, t0, many(100000, 15000)...))
	sync_(t, r)
	st := r.Stats()
	if st.Evictions != 1 || st.UsersHeld != 1 || st.BytesHeld > max {
		t.Fatalf("stats %+v", st)
	}
	sync_(t, r) // the unsubscribe of a has been read
	var unsubs []*pb.SessionUnsubscribe
	s.get(func(s *scripted) { unsubs = s.unsubs })
	if len(unsubs) != 1 || unsubs[0].UserId != "a" || !unsubs[0].Quiet {
		t.Fatalf("unsubscribed %v, want a, quiet", unsubs)
	}
	// b still answers locally with its pushed items; a subscribes again.
	check(t, r, "b", []uint64{1000 + 100000, 5}, []bool{false, true}, Local)
	check(t, r, "a", []uint64{1000, 5}, []bool{true, true}, Local)
}

func TestForgetUnsubscribesQuietlyAndDropsWhatFollows(t *testing.T) {
	s, r := start(t, relaxed, nil)
	check(t, r, "u1", ids, []bool{false, false, false, true, true}, Local)
	// A refused quiet unsubscribe is still answered, by its error: it
	// answers no request the replica waits for.
	s.set(func(s *scripted) { s.refuseUnsubs = true })
	r.Forget("homefeed", "u1")
	// A push the server queued before it read the unsubscribe, for a user
	// no longer held: dropped.
	s.push(push("u1", 1, t0, 4))
	sync_(t, r) // the unsubscribe has been read, its error received
	var unsubs []*pb.SessionUnsubscribe
	s.get(func(s *scripted) { unsubs = s.unsubs })
	// Quiet: the server answers nothing, so nothing may wait for it.
	if len(unsubs) != 1 || unsubs[0].UserId != "u1" || !unsubs[0].Quiet {
		t.Fatalf("unsubscribed %v, want u1, quiet", unsubs)
	}
	if st := r.Stats(); st.Pushes != 0 || st.UsersHeld != 0 || st.FailedChecks != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The next check subscribes again, from the server's snapshot alone.
	check(t, r, "u1", ids, []bool{false, false, false, true, true}, Local)
	if st := r.Stats(); st.Snapshots != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestOptionsAreChecked(t *testing.T) {
	if _, err := New(nil, Options{PingInterval: time.Second}); err == nil {
		t.Fatal("PingInterval >= MaxStaleness accepted")
	}
	if _, err := New(nil, Options{MaxBytes: 1000}); err == nil {
		t.Fatal("MaxBytes < 1 MiB accepted")
	}
}

// droppedBeforeItsSnapshot checks u1 and u2 (u1 the least recently), then
// holds the subscribes and makes u1 subscribe again (a gap): one subscribe
// in flight when drop lets u1 go. Its answer then arrives for a user no
// longer held: nothing is left in flight, nothing else changes, and u1's
// next check subscribes again as any first one does.
func droppedBeforeItsSnapshot(t *testing.T, opts Options, drop func(s *scripted, r *Replica)) {
	s, r := start(t, opts, nil)
	check(t, r, "u1", ids, []bool{false, false, false, true, true}, Local)
	check(t, r, "u2", ids, []bool{false, false, false, true, true}, Local)
	s.set(func(s *scripted) { s.hold = true })
	s.push(push("u1", 2, t0, 4)) // sequence 1 never came
	sync_(t, r)
	if st := r.Stats(); st.SubscribesInFlight != 1 {
		t.Fatalf("stats %+v, want u1's resubscribe in flight", st)
	}
	drop(s, r)
	sync_(t, r) // the resubscribe has been read
	var subs []*pb.SessionSubscribe
	s.get(func(s *scripted) { subs, s.hold = s.subs, false })
	if len(subs) != 3 || subs[2].UserId != "u1" {
		t.Fatalf("subscribes %v, want u1, u2 and u1 again", subs)
	}
	before := r.Stats()
	s.push(s.snapshot(subs[2], 0))
	sync_(t, r)
	if st := r.Stats(); st.SubscribesInFlight != 0 || st.UsersHeld != before.UsersHeld || st.Snapshots != before.Snapshots {
		t.Fatalf("stats %+v after the answer, %+v before it", st, before)
	}
	check(t, r, "u1", ids, []bool{false, false, false, true, true}, Local)
	if st := r.Stats(); st.SubscribesInFlight != 0 || st.Snapshots != before.Snapshots+1 {
		t.Fatalf("stats %+v after u1's next check, %+v before the answer", st, before)
	}
}

func TestAUserForgottenBeforeItsSnapshotLeavesNothingInFlight(t *testing.T) {
	droppedBeforeItsSnapshot(t, relaxed, func(s *scripted, r *Replica) {
		r.Forget("homefeed", "u1")
	})
}

func TestAUserEvictedBeforeItsSnapshotLeavesNothingInFlight(t *testing.T) {
	const max = 1 << 20
	opts := Options{MaxBytes: max, CompactAfterItems: 1 << 30, MaxStaleness: relaxed.MaxStaleness}
	droppedBeforeItsSnapshot(t, opts, func(s *scripted, r *Replica) {
		// Pushed items that take u2 past the room u1 leaves: u1, the least
		// recently checked, is evicted.
		items := make([]uint64, (max-r.Stats().BytesHeld)/pushedItemBytes+1)
		for i := range items {
			items[i] = 1000 + uint64(i)
		}
		s.push(push("u2", 1, t0, items...))
		sync_(t, r)
		if st := r.Stats(); st.Evictions != 1 || st.UsersHeld != 1 {
			t.Fatalf("stats %+v, want u1 evicted", st)
		}
	})
}

// One replica shared by goroutines, as a service uses it: checks of shared
// and own users, Sync, Stats, Forget and Reconnect at once, while the
// server pushes (gaps and compactions resubscribe, a large push evicts).
// Answers may come from any path; none may fail, and item 100 (in no
// snapshot, never pushed) is always kept. The race detector
// (go_client_race) is what this test is for.
func TestSharedByGoroutines(t *testing.T) {
	s, r := start(t, Options{MaxBytes: 1 << 20, CompactAfterItems: 64, MaxStaleness: relaxed.MaxStaleness},
		func(s *scripted) { s.sequences = map[string]uint64{} })
	users := []string{"u0", "u1", "u2", "u3"}
	for _, u := range users {
		check(t, r, u, ids, []bool{false, false, false, true, true}, Local)
	}
	done := make(chan struct{})
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	run := func(f func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for g := 0; g < 4; g++ {
		own := "own" + string(rune('a'+g))
		run(func(i int) error {
			u := users[i%len(users)]
			if i%3 == 0 {
				u = own
			}
			keep, _, err := r.CheckPath(ctx, "homefeed", u, ids, nil)
			if err != nil {
				return err
			}
			if !keep[4] {
				return status.Errorf(codes.Internal, "check of %s: item 100 not kept: %v", u, keep)
			}
			if i%50 == 49 {
				r.Forget("homefeed", own)
			}
			return nil
		})
	}
	run(func(i int) error {
		// Unavailable while the stream is being replaced.
		if err := r.Sync(ctx); err != nil && status.Code(err) != codes.Unavailable {
			return err
		}
		_ = r.Stats()
		time.Sleep(time.Millisecond)
		return nil
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		seq := map[string]uint64{}
		for _, u := range users {
			seq[u] = s.base.Sequence
		}
		for i := 0; i < 400; i++ {
			u := users[i%len(users)]
			seq[u]++
			if i%37 == 36 {
				seq[u]++ // one lost: a gap
			}
			n := uint64(8)
			if i == 250 {
				n = 30000 // past MaxBytes beside the others: evicts
			}
			items := make([]uint64, n)
			for j := range items {
				items[j] = 1000 + uint64(i)*100000 + uint64(j)
			}
			// Snapshots from now on are at this push: the next ones follow
			// them (a snapshot read before it makes it a gap, still).
			s.set(func(s *scripted) { s.sequences[u] = seq[u] })
			s.push(push(u, seq[u], t0, items...))
			if i%100 == 99 {
				r.Reconnect()
			}
			time.Sleep(time.Millisecond)
		}
		close(done)
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := r.Stats(); st.Reconnects < 4 || st.Pushes == 0 || st.LocalChecks == 0 {
		t.Errorf("stats %+v", st)
	}
}
