package efclient

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"exposurefilter/filterview"
	"exposurefilter/partitioning"
	pb "exposurefilter/v1"
)

// A scripted replica: answer decides each call's outcome, every request
// is kept.
type fake struct {
	pb.UnimplementedExposureFilterServer
	mu     sync.Mutex
	seen   []proto.Message
	answer func(method string, req proto.Message) (proto.Message, error)
}

func (f *fake) call(ctx context.Context, method string, req proto.Message, empty proto.Message) (proto.Message, error) {
	f.mu.Lock()
	f.seen = append(f.seen, proto.Clone(req))
	answer := f.answer
	f.mu.Unlock()
	if answer == nil {
		return empty, nil
	}
	resp, err := answer(method, req)
	if err != nil {
		var h hinted
		if errors.As(err, &h) {
			grpc.SetTrailer(ctx, metadata.Pairs(OwnerMetadataKey, h.hint))
			return nil, h.err
		}
		if err == errHang {
			<-ctx.Done()
			return nil, status.Error(codes.DeadlineExceeded, "hung")
		}
		return nil, err
	}
	if resp == nil {
		return empty, nil
	}
	return resp, nil
}

type hinted struct {
	err  error
	hint string
}

func (h hinted) Error() string { return h.err.Error() }

var errHang = errors.New("hang")

func (f *fake) FilterRecalled(ctx context.Context, r *pb.FilterRecalledRequest) (*pb.FilterRecalledResponse, error) {
	m, err := f.call(ctx, "FilterRecalled", r, &pb.FilterRecalledResponse{})
	if err != nil {
		return nil, err
	}
	return m.(*pb.FilterRecalledResponse), nil
}

func (f *fake) GetFilter(ctx context.Context, r *pb.GetFilterRequest) (*pb.GetFilterResponse, error) {
	m, err := f.call(ctx, "GetFilter", r, &pb.GetFilterResponse{})
	if err != nil {
		return nil, err
	}
	return m.(*pb.GetFilterResponse), nil
}

func (f *fake) RecordExposure(ctx context.Context, r *pb.RecordExposureRequest) (*pb.RecordExposureResponse, error) {
	m, err := f.call(ctx, "RecordExposure", r, &pb.RecordExposureResponse{})
	if err != nil {
		return nil, err
	}
	return m.(*pb.RecordExposureResponse), nil
}

func (f *fake) requests() []proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]proto.Message(nil), f.seen...)
}

// cluster starts n scripted replicas on loopback.
func cluster(t *testing.T, n int) ([]*fake, []grpc.ClientConnInterface) {
	var fakes []*fake
	var conns []grpc.ClientConnInterface
	for i := 0; i < n; i++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		f := &fake{}
		pb.RegisterExposureFilterServer(s, f)
		go s.Serve(lis)
		t.Cleanup(s.Stop)
		cc, err := Dial(lis.Addr().String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		fakes = append(fakes, f)
		conns = append(conns, cc)
	}
	return fakes, conns
}

// userOwnedBy finds a user whose owner 0 is replica r (P = 12, N = 3).
func userOwnedBy(r int) string {
	for i := 0; ; i++ {
		u := "user-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if partitioning.ReplicaForUser(u, 12, 3) == r {
			return u
		}
	}
}

func unavailable(string, proto.Message) (proto.Message, error) {
	return nil, status.Error(codes.Unavailable, "scripted")
}

func TestFailsOverOnUnavailableToTheNextOwner(t *testing.T) {
	fakes, conns := cluster(t, 3)
	rc, err := NewRoutingClient(conns, RoutingOptions{Partitions: 12, ReplicationFactor: 2})
	if err != nil {
		t.Fatal(err)
	}
	user := userOwnedBy(0)
	fakes[0].answer = unavailable
	fakes[1].answer = func(string, proto.Message) (proto.Message, error) {
		return &pb.FilterRecalledResponse{KeptIds: []uint64{7}}, nil
	}
	resp, err := rc.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{Surface: "s", UserId: user, CandidateIds: []uint64{7}})
	if err != nil || len(resp.KeptIds) != 1 {
		t.Fatalf("%v %v", resp, err)
	}
	st := rc.Stats()
	if st.Failovers != 1 || st.ReplicaErrors[0] != 1 || st.ReplicaErrors[1] != 0 {
		t.Errorf("stats %+v", st)
	}
	// The last owner's try carries allow_lagging; the first does not.
	if fakes[0].requests()[0].(*pb.FilterRecalledRequest).AllowLagging ||
		!fakes[1].requests()[0].(*pb.FilterRecalledRequest).AllowLagging {
		t.Error("allow_lagging must be set on the last owner's try only")
	}
}

func TestClientRetriesUnavailableOnTheSameServer(t *testing.T) {
	fakes, conns := cluster(t, 1)
	calls := 0
	fakes[0].answer = func(string, proto.Message) (proto.Message, error) {
		calls++
		if calls < 3 {
			return nil, status.Error(codes.Unavailable, "not yet")
		}
		return nil, nil
	}
	c := NewClient(conns[0])
	if _, err := c.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{UserId: "u"}); err != nil || calls != 3 {
		t.Fatalf("%v after %d calls", err, calls)
	}
	calls = 0
	c.MaxAttempts = 2
	if _, err := c.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{UserId: "u"}); status.Code(err) != codes.Unavailable || calls != 2 {
		t.Fatalf("%v after %d calls", err, calls)
	}
	calls = -100 // INVALID_ARGUMENT is not retried
	fakes[0].answer = func(string, proto.Message) (proto.Message, error) {
		calls++
		return nil, status.Error(codes.InvalidArgument, "no")
	}
	if _, err := c.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{UserId: "u"}); status.Code(err) != codes.InvalidArgument || calls != -99 {
		t.Fatalf("%v after %d calls", err, calls)
	}
}

func TestEveryOwnerFailedNamesEachTry(t *testing.T) {
	fakes, conns := cluster(t, 3)
	rc, _ := NewRoutingClient(conns, RoutingOptions{Partitions: 12, ReplicationFactor: 2})
	fakes[0].answer, fakes[1].answer = unavailable, unavailable
	_, err := rc.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{Surface: "s", UserId: userOwnedBy(0)})
	// Owner 0 is asked once more as a last owner (it might only have been
	// lagging) and fails again.
	want := "UNAVAILABLE: every owner failed (2 of 2 tried): replica 0: UNAVAILABLE: scripted; replica 1: UNAVAILABLE: scripted; replica 0: UNAVAILABLE: scripted"
	if err == nil || err.Error() != want || status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v (code %v), want %s", err, status.Code(err), want)
	}
	var of *OwnersFailedError
	if !errors.As(err, &of) || len(of.Failures) != 3 {
		t.Errorf("not an OwnersFailedError with 3 failures: %#v", err)
	}
}

// The last owner in placement order is down and the earlier one lags: the
// earlier one is asked again with allow_lagging and its answer is the read's.
func TestALaggingOwnerAnswersWhenTheLastOwnerIsDown(t *testing.T) {
	fakes, conns := cluster(t, 3)
	rc, _ := NewRoutingClient(conns, RoutingOptions{Partitions: 12, ReplicationFactor: 2})
	fakes[0].answer = func(_ string, m proto.Message) (proto.Message, error) {
		if !m.(*pb.FilterRecalledRequest).GetAllowLagging() {
			return nil, status.Error(codes.Unavailable, "this copy is lagging 1.3s behind")
		}
		return &pb.FilterRecalledResponse{KeptIds: []uint64{7},
			Staleness: &pb.ReadStaleness{LagMs: 1300, Lagging: true}}, nil
	}
	fakes[1].answer = unavailable
	resp, err := rc.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{Surface: "s", UserId: userOwnedBy(0), CandidateIds: []uint64{7}})
	if err != nil || !resp.GetStaleness().GetLagging() {
		t.Fatalf("%v %v", resp, err)
	}
	if st := rc.Stats(); st.LaggingAnswers != 1 || st.Failovers != 2 {
		t.Errorf("stats %+v", st)
	}
}

// Writes get no last-resort pass.
func TestAWriteIsNotRetriedAsALastResort(t *testing.T) {
	fakes, conns := cluster(t, 3)
	rc, _ := NewRoutingClient(conns, RoutingOptions{Partitions: 12, ReplicationFactor: 2})
	fakes[0].answer, fakes[1].answer = unavailable, unavailable
	res := rc.RecordExposure(context.Background(), &pb.RecordExposureRequest{Surface: "s",
		Exposures: []*pb.Exposure{{UserId: userOwnedBy(0), ItemIds: []uint64{7}}}})
	if res.Err() == nil {
		t.Fatal("a write to two owners that are down succeeded")
	}
	if n0, n1 := len(fakes[0].requests()), len(fakes[1].requests()); n0 != n1 {
		t.Errorf("owner 0 saw %d requests, owner 1 %d: a write was retried as a last resort", n0, n1)
	}
}

func TestOneOwnerReturnsItsErrorAsItCame(t *testing.T) {
	fakes, conns := cluster(t, 3)
	rc, _ := NewRoutingClient(conns, RoutingOptions{Partitions: 12})
	fakes[0].answer = unavailable
	_, err := rc.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{Surface: "s", UserId: userOwnedBy(0)})
	if s, _ := status.FromError(err); s.Code() != codes.Unavailable || s.Message() != "scripted" {
		t.Fatalf("%v", err)
	}
}

func TestOtherCodesAreFinal(t *testing.T) {
	fakes, conns := cluster(t, 3)
	rc, _ := NewRoutingClient(conns, RoutingOptions{Partitions: 12, ReplicationFactor: 2})
	fakes[0].answer = func(string, proto.Message) (proto.Message, error) {
		return nil, status.Error(codes.InvalidArgument, "candidate_keys[0]: empty")
	}
	_, err := rc.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{Surface: "s", UserId: userOwnedBy(0)})
	if status.Code(err) != codes.InvalidArgument || len(fakes[1].requests()) != 0 || rc.Stats().Failovers != 0 {
		t.Fatalf("%v, replica 1 saw %d", err, len(fakes[1].requests()))
	}
}

func TestPerTryTimeoutMovesOnAndTheDeadlineIsKept(t *testing.T) {
	fakes, conns := cluster(t, 3)
	rc, _ := NewRoutingClient(conns, RoutingOptions{Partitions: 12, ReplicationFactor: 2,
		Timeout: 2 * time.Second, PerTryTimeout: 100 * time.Millisecond})
	fakes[0].answer = func(string, proto.Message) (proto.Message, error) { return nil, errHang }
	start := time.Now()
	if _, err := rc.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{Surface: "s", UserId: userOwnedBy(0)}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("took %v", d)
	}
	// Both hang: the call ends with DEADLINE_EXCEEDED at its own deadline.
	fakes[1].answer = fakes[0].answer
	rc2, _ := NewRoutingClient(conns, RoutingOptions{Partitions: 12, ReplicationFactor: 2, Timeout: 300 * time.Millisecond})
	start = time.Now()
	_, err := rc2.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{Surface: "s", UserId: userOwnedBy(0)})
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "before owners 1 were tried") {
		t.Errorf("%v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("deadline of 300ms took %v", d)
	}
}

func TestOwnerHintDiagnosesAndAdoptsR(t *testing.T) {
	fakes, conns := cluster(t, 3)
	user := userOwnedBy(0)
	notMine := func(hint string) func(string, proto.Message) (proto.Message, error) {
		return func(string, proto.Message) (proto.Message, error) {
			return nil, hinted{status.Error(codes.FailedPrecondition, "not my user"), hint}
		}
	}
	rc, _ := NewRoutingClient(conns, RoutingOptions{Partitions: 12})
	fakes[0].answer = notMine("ordinal=1;partition=7;partitions=8;replicas=3;self=0")
	_, err := rc.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{Surface: "s", UserId: user})
	var re *RoutingError
	if !errors.As(err, &re) || status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "routing misconfigured: this client routes with partitions=12 replicas=3") {
		t.Fatalf("%v", err)
	}
	fakes[0].answer = notMine("ordinal=1;partition=7;partitions=12;replicas=3;self=2")
	if _, err := rc.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{Surface: "s", UserId: user}); !strings.Contains(err.Error(), "reaches replica 2") {
		t.Errorf("%v", err)
	}
	// Same P and N, R = 2 on the server: adopted, owner 1 answers.
	fakes[0].answer = notMine("ordinal=0;partition=0;partitions=12;replicas=3;self=0;replication_factor=2")
	if _, err := rc.FilterRecalled(context.Background(), &pb.FilterRecalledRequest{Surface: "s", UserId: user}); err != nil {
		t.Fatal(err)
	}
	if rc.ReplicationFactor() != 2 || rc.Stats().PlacementUpdates != 1 {
		t.Errorf("R %d, stats %+v", rc.ReplicationFactor(), rc.Stats())
	}
}

func TestReadYourWritesSendsTheUsersOffset(t *testing.T) {
	fakes, conns := cluster(t, 3)
	rc, _ := NewRoutingClient(conns, RoutingOptions{Partitions: 12, ReplicationFactor: 2, ReadYourWrites: true})
	user := userOwnedBy(0)
	p := int32(partitioning.PartitionForKey([]byte(user), 12))
	fakes[0].answer = func(method string, _ proto.Message) (proto.Message, error) {
		if method == "RecordExposure" {
			return &pb.RecordExposureResponse{ItemsRecorded: 1, WrittenOffsets: map[int32]int64{p: 41, p + 1: 9}}, nil
		}
		return nil, nil
	}
	res := rc.RecordExposure(context.Background(), &pb.RecordExposureRequest{Surface: "s",
		Exposures: []*pb.Exposure{{UserId: user, ItemIds: []uint64{1}}}})
	if res.Err() != nil || res.ItemsRecorded != 1 || res.Owners[0].WrittenBy != 0 || res.WrittenOffsets()[p] != 41 {
		t.Fatalf("%+v", res)
	}
	req := &pb.FilterRecalledRequest{Surface: "s", UserId: user}
	if _, err := rc.FilterRecalled(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	seen := fakes[0].requests()
	got := seen[len(seen)-1].(*pb.FilterRecalledRequest).MinOffsets
	if len(got) != 1 || got[p] != 41 || len(req.MinOffsets) != 0 || rc.Stats().ReadsWithOffsets != 1 {
		t.Errorf("min_offsets sent %v, caller's request %v", got, req.MinOffsets)
	}
	// Folding past the bound is stricter, never weaker.
	tk := newTokens(1)
	tk.record("a", 3, 10)
	tk.record("b", 3, 5)
	if off, ok := tk.lookup("a", 3); !ok || off != 10 {
		t.Errorf("folded a: %d %v", off, ok)
	}
	if off, ok := tk.lookup("b", 3); !ok || off != 10 {
		t.Errorf("b after the fold: %d %v", off, ok)
	}
}

func TestWritesFailOverAndSayWhatToResend(t *testing.T) {
	fakes, conns := cluster(t, 3)
	rc, _ := NewRoutingClient(conns, RoutingOptions{Partitions: 12, ReplicationFactor: 2})
	u0, u1 := userOwnedBy(0), userOwnedBy(1)
	fakes[0].answer = unavailable
	fakes[2].answer = unavailable // u1's owners are 1, 2: 1 answers
	fakes[1].answer = unavailable
	req := &pb.RecordExposureRequest{Surface: "s", Exposures: []*pb.Exposure{
		{UserId: u0, ItemIds: []uint64{1}}, {UserId: u1, ItemIds: []uint64{2}}}}
	res := rc.RecordExposure(context.Background(), req)
	if got := res.FailedExposures(); len(got) != 2 || status.Code(errors.Unwrap(res.Err())) != codes.Unavailable {
		t.Fatalf("failed %v, err %v", got, res.Err())
	}
	fakes[1].answer = nil
	res = rc.RecordExposure(context.Background(), req)
	if res.Err() != nil || res.Owners[0].WrittenBy != 1 || res.Owners[1].WrittenBy != 1 {
		t.Fatalf("%+v %v", res.Owners, res.Err())
	}
}

func goldenFilter(t *testing.T, name string) []byte {
	raw, err := os.ReadFile(filepath.Join(os.Getenv("EF_TESTDATA_DIR"), name+".json"))
	if err != nil {
		t.Fatalf("%v (set EF_TESTDATA_DIR to tests/testdata)", err)
	}
	var v struct {
		FilterHex string `json:"filter_hex"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	b, _ := hex.DecodeString(v.FilterHex)
	return b
}

func TestFilterCacheRevalidatesAndIsBoundedByBytes(t *testing.T) {
	fakes, conns := cluster(t, 1)
	tiny, multi := goldenFilter(t, "tiny"), goldenFilter(t, "multi_slice")
	tinyView, _ := filterview.Parse(tiny)
	multiView, _ := filterview.Parse(multi)
	fakes[0].answer = func(_ string, m proto.Message) (proto.Message, error) {
		r := m.(*pb.GetFilterRequest)
		data, v := tiny, tinyView.Version()
		if r.UserId == "big" {
			data, v = multi, multiView.Version()
		}
		if r.UserId == "corrupt" {
			data = append([]byte(nil), tiny...)
			data[40] ^= 1
		}
		if r.IfVersion == v {
			return &pb.GetFilterResponse{Version: v, NotModified: true}, nil
		}
		return &pb.GetFilterResponse{Filter: data, Version: v}, nil
	}
	cache := NewFilterCache(NewClient(conns[0]).Getter(), tinyView.SizeBytes()+multiView.SizeBytes()-1)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if v, err := cache.Get(ctx, "s", "u1"); err != nil || !v.MayContainID(1) {
			t.Fatal(err)
		}
	}
	seen := fakes[0].requests()
	first := seen[0].(*pb.GetFilterRequest)
	if first.IfVersion != "" || len(first.AcceptedFormats) != 2 || seen[1].(*pb.GetFilterRequest).IfVersion != tinyView.Version() {
		t.Errorf("requests %v", seen)
	}
	if s := cache.Stats(); s.FullPulls != 1 || s.NotModified != 2 || s.Users != 1 {
		t.Errorf("stats %+v", s)
	}
	// The big filter does not fit beside the small one: the least recent goes.
	if _, err := cache.Get(ctx, "s", "big"); err != nil {
		t.Fatal(err)
	}
	if s := cache.Stats(); s.Users != 1 || s.Evictions != 1 || s.Bytes != multiView.SizeBytes() {
		t.Errorf("stats %+v", s)
	}
	_, err := cache.Get(ctx, "s", "corrupt")
	if status.Code(err) != codes.DataLoss || !errors.Is(err, filterview.ErrMalformed) {
		t.Errorf("corrupt bytes: %v", err)
	}
	if s := cache.Stats(); s.Users != 1 || s.Errors != 1 {
		t.Errorf("stats %+v", s)
	}
}

// One routing client and one filter cache shared by goroutines: reads
// with remembered offsets while writes record more (past MaxTokenUsers,
// so they fold), R adopted from an owner hint meanwhile, filters pulled
// and revalidated through a cache that evicts, Stats read throughout. The
// race detector (go_client_race) is what this test is for.
func TestSharedByGoroutines(t *testing.T) {
	fakes, conns := cluster(t, 3)
	tiny, multi := goldenFilter(t, "tiny"), goldenFilter(t, "multi_slice")
	tinyView, _ := filterview.Parse(tiny)
	multiView, _ := filterview.Parse(multi)
	var offset atomic.Int64
	var hinted_ atomic.Bool
	for i, f := range fakes {
		i := i
		f.answer = func(method string, m proto.Message) (proto.Message, error) {
			switch method {
			case "RecordExposure":
				written := map[int32]int64{}
				for _, e := range m.(*pb.RecordExposureRequest).Exposures {
					written[int32(partitioning.PartitionForKey([]byte(e.UserId), 12))] = offset.Add(1)
				}
				return &pb.RecordExposureResponse{ItemsRecorded: 1, WrittenOffsets: written}, nil
			case "GetFilter":
				r := m.(*pb.GetFilterRequest)
				data, v := tiny, tinyView.Version()
				if r.UserId == "big" {
					data, v = multi, multiView.Version()
				}
				if r.IfVersion == v {
					return &pb.GetFilterResponse{Version: v, NotModified: true}, nil
				}
				return &pb.GetFilterResponse{Filter: data, Version: v}, nil
			}
			// The first read: the servers run with R = 2.
			if hinted_.CompareAndSwap(false, true) {
				return nil, hinted{status.Error(codes.FailedPrecondition, "not my user"),
					fmt.Sprintf("ordinal=%d;partition=0;partitions=12;replicas=3;self=%d;replication_factor=2", i, i)}
			}
			return nil, nil
		}
	}
	rc, err := NewRoutingClient(conns, RoutingOptions{Partitions: 12, ReadYourWrites: true, MaxTokenUsers: 4})
	if err != nil {
		t.Fatal(err)
	}
	cache := NewFilterCache(rc, tinyView.SizeBytes()+multiView.SizeBytes()-1)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 4; g++ {
		g := g
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				user := "user-" + string(rune('a'+(g+i)%8))
				var err error
				switch i % 4 {
				case 0:
					err = rc.RecordExposure(ctx, &pb.RecordExposureRequest{Surface: "s",
						Exposures: []*pb.Exposure{{UserId: user, ItemIds: []uint64{uint64(i)}}}}).Err()
				case 1:
					_, err = rc.FilterRecalled(ctx, &pb.FilterRecalledRequest{Surface: "s", UserId: user, CandidateIds: []uint64{1}})
				case 2:
					// Two users, not both held: revalidated or evicted.
					user = "small"
					if (g+i)%3 == 0 {
						user = "big"
					}
					_, err = cache.Get(ctx, "s", user)
				case 3:
					_, _ = rc.Stats(), cache.Stats()
					_ = rc.OwnersForUser(user)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if rc.ReplicationFactor() != 2 || rc.Stats().PlacementUpdates != 1 || rc.Stats().ReadsWithOffsets == 0 {
		t.Errorf("R %d, stats %+v", rc.ReplicationFactor(), rc.Stats())
	}
	if s := cache.Stats(); s.Evictions == 0 || s.NotModified == 0 {
		t.Errorf("cache stats %+v", s)
	}
}
