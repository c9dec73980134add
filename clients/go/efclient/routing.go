package efclient

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"exposurefilter/partitioning"
	pb "exposurefilter/v1"
)

// OwnerMetadataKey is the trailing metadata key in which a partitioned
// replica names a user's owner when refusing the call
// (FAILED_PRECONDITION): "ordinal=1;partition=7;partitions=12;replicas=3;
// self=0[;replication_factor=2][;address=...]".
const OwnerMetadataKey = "x-exposure-owner"

// OwnerHint is the decoded x-exposure-owner value.
type OwnerHint struct {
	Ordinal, Partition, Partitions, Replicas, Self int
	ReplicationFactor                              int // 1 when absent
	Address                                        string
}

// ParseOwnerHint decodes the x-exposure-owner value; ok is false unless
// ordinal, partition, partitions and replicas are present and numeric
// (unknown keys are skipped, as later servers may add some).
func ParseOwnerHint(text string) (OwnerHint, bool) {
	h := OwnerHint{Self: -1, ReplicationFactor: 1}
	seen := 0
	for _, pair := range strings.Split(text, ";") {
		eq := strings.IndexByte(pair, '=')
		if eq < 0 {
			return h, false
		}
		key, value := pair[:eq], pair[eq+1:]
		if key == "address" {
			h.Address = value
			continue
		}
		var dst *int
		switch key {
		case "ordinal":
			dst = &h.Ordinal
			seen |= 1
		case "partition":
			dst = &h.Partition
			seen |= 2
		case "partitions":
			dst = &h.Partitions
			seen |= 4
		case "replicas":
			dst = &h.Replicas
			seen |= 8
		case "self":
			dst = &h.Self
		case "replication_factor":
			dst = &h.ReplicationFactor
		default:
			continue
		}
		v, err := strconv.Atoi(value)
		if err != nil {
			return h, false
		}
		*dst = v
	}
	return h, seen == 15
}

// OwnerHintFrom reads the hint from a call's trailing metadata.
func OwnerHintFrom(trailer metadata.MD) (OwnerHint, bool) {
	v := trailer.Get(OwnerMetadataKey)
	if len(v) == 0 {
		return OwnerHint{}, false
	}
	return ParseOwnerHint(v[0])
}

// OwnersFailedError: every owner of the user failed (codes.Unavailable),
// or the deadline ended before all were tried (codes.DeadlineExceeded).
// Failures lists "replica r: CODE: message" per try, in order; Last is
// the last try's error. status.Code(err) gives Code.
type OwnersFailedError struct {
	Code     codes.Code
	Message  string
	Failures []string
	Last     error
}

func (e *OwnersFailedError) Error() string {
	return fmt.Sprintf("%s: %s", codeName(e.Code), e.Message)
}
func (e *OwnersFailedError) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }
func (e *OwnersFailedError) Unwrap() error              { return e.Last }

// RoutingError: client and cluster disagree on P, N, R or the replica
// order; no retry can fix it. Its code is the server's
// (FAILED_PRECONDITION); Hint is what the server said.
type RoutingError struct {
	Message string
	Hint    OwnerHint
	Err     error // the server's answer
}

func (e *RoutingError) Error() string {
	return "FAILED_PRECONDITION: " + e.Message
}
func (e *RoutingError) GRPCStatus() *status.Status {
	return status.New(codes.FailedPrecondition, e.Message)
}
func (e *RoutingError) Unwrap() error { return e.Err }

func codeName(c codes.Code) string {
	// codes.Code.String() gives "Unavailable"; the C++ and Python clients
	// print the canonical upper-case names.
	names := map[codes.Code]string{
		codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
		codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
		codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
		codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
		codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
		codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
		codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
		codes.Unauthenticated: "UNAUTHENTICATED",
	}
	if n, ok := names[c]; ok {
		return n
	}
	return c.String()
}

// RoutingOptions configures a RoutingClient.
type RoutingOptions struct {
	// Partitions is the servers' --partitions (P).
	Partitions int
	// ReplicationFactor is the servers' --replication_factor (R, default 1).
	ReplicationFactor int
	// Timeout is a call's deadline over all owners when its context has
	// none (default DefaultTimeout). A failover never extends it.
	Timeout time.Duration
	// PerTryTimeout bounds one try (0: a try may use the whole deadline).
	// Set it above the read's p99, below Timeout / R.
	PerTryTimeout time.Duration
	// MaxAttempts is each replica's Client.MaxAttempts: UNAVAILABLE is
	// retried on the same replica inside each try before the client fails
	// over (0 = 3; with R >= 2, 1 or 2 moves to the healthy copy sooner).
	MaxAttempts int
	// ReadYourWrites remembers, per user, the Kafka offset its own
	// RecordExposure / DeleteUser got in the user's partition and sends it
	// as min_offsets with that user's later reads (unless the request has
	// min_offsets of its own).
	ReadYourWrites bool
	// MaxTokenUsers bounds the per-user offsets (default 100,000); past it
	// they fold into one offset per partition (stricter, never weaker).
	MaxTokenUsers int
}

// RoutingStats are monotonic counters since the client was created.
type RoutingStats struct {
	Failovers        int64   // tries on a next owner after a failed try
	PlacementUpdates int64   // R adopted from a server's owner hint
	LaggingAnswers   int64   // reads a lagging copy answered (last owner's try)
	ReadsWithOffsets int64   // reads sent with remembered min_offsets
	ReplicaErrors    []int64 // failed tries per replica ordinal
}

// RoutingClient sends each call to the user's owner (docs/scale-out.md):
// replica i is replicas[i], in ordinal order. With replication factor R a
// call goes to owner 0 and, when a try ends in UNAVAILABLE, CANCELLED or
// exceeds the per-try timeout, to owner 1, 2, ... inside the same
// deadline; other codes are final. A FAILED_PRECONDITION owner hint that
// reports another R with the same P and N is adopted and the call goes on
// with the new placement's untried owners; any other hint is a
// RoutingError saying what is misconfigured. Writes fail over too
// (recording is idempotent) and are split per owner. Safe for concurrent
// use.
type RoutingClient struct {
	replicas       []*Client
	partitions     int
	replication    atomic.Int32
	timeout        time.Duration
	perTry         time.Duration
	tokens         *tokens
	failovers      atomic.Int64
	placements     atomic.Int64
	lagging        atomic.Int64
	readsWithToken atomic.Int64
	replicaErrors  []atomic.Int64
}

// NewRoutingClient routes over one channel per replica, in ordinal order.
func NewRoutingClient(replicas []grpc.ClientConnInterface, opts RoutingOptions) (*RoutingClient, error) {
	r := opts.ReplicationFactor
	if r == 0 {
		r = 1
	}
	if opts.Partitions < 1 {
		return nil, status.Errorf(codes.InvalidArgument, "partitions: must be >= 1, got %d", opts.Partitions)
	}
	if err := partitioning.CheckLayout(opts.Partitions, len(replicas), r); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if opts.Timeout < 0 || opts.PerTryTimeout < 0 {
		return nil, status.Error(codes.InvalidArgument, "timeouts must not be negative")
	}
	c := &RoutingClient{partitions: opts.Partitions, timeout: opts.Timeout, perTry: opts.PerTryTimeout,
		replicaErrors: make([]atomic.Int64, len(replicas))}
	if c.timeout == 0 {
		c.timeout = DefaultTimeout
	}
	c.replication.Store(int32(r))
	for _, cc := range replicas {
		cl := NewClient(cc)
		cl.MaxAttempts = opts.MaxAttempts
		c.replicas = append(c.replicas, cl)
	}
	if opts.ReadYourWrites {
		max := opts.MaxTokenUsers
		if max <= 0 {
			max = 100000
		}
		c.tokens = newTokens(max)
	}
	return c, nil
}

// Replica returns replica i's plain client.
func (c *RoutingClient) Replica(i int) *Client { return c.replicas[i] }

// ReplicationFactor is the R the client routes with now.
func (c *RoutingClient) ReplicationFactor() int { return int(c.replication.Load()) }

// OwnersForUser lists the user's R owners, owner 0 first: the order calls
// try them.
func (c *RoutingClient) OwnersForUser(userID string) []int {
	return partitioning.OwnersOfUser(userID, c.partitions, len(c.replicas), c.ReplicationFactor())
}

// Stats returns the counters.
func (c *RoutingClient) Stats() RoutingStats {
	s := RoutingStats{Failovers: c.failovers.Load(), PlacementUpdates: c.placements.Load(),
		LaggingAnswers: c.lagging.Load(), ReadsWithOffsets: c.readsWithToken.Load()}
	for i := range c.replicaErrors {
		s.ReplicaErrors = append(s.ReplicaErrors, c.replicaErrors[i].Load())
	}
	return s
}

// tryFunc makes one try on a replica; lastOwner is set on the last of two
// or more owners (reads then set allow_lagging).
type tryFunc func(ctx context.Context, replica int, lastOwner bool, opts ...grpc.CallOption) (proto.Message, error)

// failover runs one call over owners inside one deadline. With lagGated
// (reads a lagging copy may answer with allow_lagging), once every owner
// has failed and time is left, each earlier owner that answered
// UNAVAILABLE is tried once more as a last owner: the last owner in
// placement order may be down while an earlier one only lagged.
func (c *RoutingClient) failover(ctx context.Context, userID string, owners []int, lagGated bool, try tryFunc) (proto.Message, int, error) {
	callCtx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		callCtx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	defer cancel()
	// Past the call's deadline, read from the clock: ctx.Err() turns
	// non-nil only once the context's timer has run, which on a loaded
	// machine can be after a try that ran to the same deadline returned
	// (an in-process server's timer fired first), and the call would then
	// start the next owner with no time left.
	expired := func() bool {
		if callCtx.Err() != nil {
			return true
		}
		d, ok := callCtx.Deadline()
		return ok && !time.Now().Before(d)
	}
	var failures []string
	var lastErr error
	tried := 0
	var refused []int // answered UNAVAILABLE to a try that was not a last owner's
	// One try and what its outcome means, the same in both passes: done
	// when the call has its result (an answer, or the caller's own cancel
	// or deadline), else the failure is counted and named.
	once := func(replica int, lastOwner bool) (resp proto.Message, trailer metadata.MD, done bool, err error) {
		tryCtx, tryCancel := callCtx, context.CancelFunc(func() {})
		if c.perTry > 0 {
			tryCtx, tryCancel = context.WithTimeout(callCtx, c.perTry)
		}
		defer tryCancel()
		resp, err = try(tryCtx, replica, lastOwner, grpc.Trailer(&trailer))
		if err == nil {
			return resp, trailer, true, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			// The caller cancelled or its own deadline passed: its answer.
			return nil, trailer, true, err
		}
		c.replicaErrors[replica].Add(1)
		failures = append(failures, fmt.Sprintf("replica %d: %s: %s", replica, codeName(status.Code(err)), status.Convert(err).Message()))
		return nil, trailer, false, err
	}
	for next := 0; next < len(owners); next++ {
		if next > 0 && expired() {
			break // no owner is started once the deadline has passed
		}
		replica := owners[next]
		lastOwner := len(owners) > 1 && next == len(owners)-1
		resp, trailer, done, err := once(replica, lastOwner)
		tried++
		if done {
			return resp, replica, err
		}
		code := status.Code(err)
		if code == codes.Unavailable && !lastOwner {
			refused = append(refused, replica)
		}
		goOn := code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Canceled
		if !goOn && code == codes.FailedPrecondition {
			// Owner i is (p + i) % N whatever R: a new list extends or
			// truncates the old one, whose first next+1 were tried.
			if replanned := c.replan(userID, trailer); len(replanned) > next+1 {
				owners = replanned
				goOn = true
			}
		}
		if !goOn {
			return nil, replica, c.diagnose(replica, err, trailer)
		}
		if next+1 < len(owners) && !expired() {
			c.failovers.Add(1)
		}
	}
	if lagGated && len(owners) > 1 && tried >= len(owners) {
		for _, replica := range refused {
			if expired() {
				break
			}
			c.failovers.Add(1)
			if resp, _, done, err := once(replica, true); done {
				return resp, replica, err
			}
		}
	}
	untried := owners[tried:]
	if tried == 1 && len(untried) == 0 {
		return nil, owners[0], lastErr // one owner (R = 1): its error as it came
	}
	joined := strings.Join(failures, "; ")
	if len(untried) > 0 {
		u := make([]string, len(untried))
		for i, o := range untried {
			u[i] = strconv.Itoa(o)
		}
		return nil, -1, &OwnersFailedError{Code: codes.DeadlineExceeded, Failures: failures, Last: lastErr,
			Message: fmt.Sprintf("deadline reached before owners %s were tried: %s", strings.Join(u, ", "), joined)}
	}
	if expired() {
		return nil, -1, &OwnersFailedError{Code: codes.DeadlineExceeded, Failures: failures, Last: lastErr,
			Message: "deadline reached; every owner was tried: " + joined}
	}
	return nil, -1, &OwnersFailedError{Code: codes.Unavailable, Failures: failures, Last: lastErr,
		Message: fmt.Sprintf("every owner failed (%d of %d tried): %s", tried, len(owners), joined)}
}

// replan returns the owners of the placement a hint reports when it has
// this client's P and N but another R (adopting that R), else nil.
func (c *RoutingClient) replan(userID string, trailer metadata.MD) []int {
	h, ok := OwnerHintFrom(trailer)
	if !ok || h.Partitions != c.partitions || h.Replicas != len(c.replicas) ||
		h.ReplicationFactor < 1 || h.ReplicationFactor > len(c.replicas) {
		return nil
	}
	r := c.replication.Load()
	if int32(h.ReplicationFactor) == r {
		return nil
	}
	if c.replication.CompareAndSwap(r, int32(h.ReplicationFactor)) {
		c.placements.Add(1)
	}
	return partitioning.OwnersOfUser(userID, c.partitions, len(c.replicas), h.ReplicationFactor)
}

// diagnose turns a FAILED_PRECONDITION with an owner hint into a
// RoutingError naming the misconfiguration; other errors pass as they are.
func (c *RoutingClient) diagnose(replica int, err error, trailer metadata.MD) error {
	if status.Code(err) != codes.FailedPrecondition {
		return err
	}
	h, ok := OwnerHintFrom(trailer)
	if !ok {
		return err
	}
	var why string
	switch {
	case h.Partitions != c.partitions || h.Replicas != len(c.replicas):
		why = fmt.Sprintf("routing misconfigured: this client routes with partitions=%d replicas=%d "+
			"but the server at replica_addresses[%d] runs --partitions=%d --replicas=%d; "+
			"make them agree (docs/scale-out.md)", c.partitions, len(c.replicas), replica, h.Partitions, h.Replicas)
	case h.ReplicationFactor != c.ReplicationFactor():
		why = fmt.Sprintf("routing misconfigured: this client routes with replication_factor=%d "+
			"but the server at replica_addresses[%d] runs --replication_factor=%d",
			c.ReplicationFactor(), replica, h.ReplicationFactor)
	case h.Self != replica:
		why = fmt.Sprintf("routing misconfigured: replica_addresses[%d] reaches replica %d; "+
			"list the addresses in ordinal order", replica, h.Self)
	default:
		why = fmt.Sprintf("routing disagreement with replica %d on the owner of a user (partitioner mismatch?)", replica)
	}
	return &RoutingError{Message: why + ": " + status.Convert(err).Message(), Hint: h, Err: err}
}

// read runs a lag-gated read: min_offsets from the tokens, allow_lagging
// on the last owner's try, the lagging answers counted.
func routedRead[Req interface {
	proto.Message
	GetUserId() string
	GetMinOffsets() map[int32]int64
}, Resp interface {
	proto.Message
	GetStaleness() *pb.ReadStaleness
}](c *RoutingClient, ctx context.Context, req Req, set func(Req, map[int32]int64, bool),
	call func(*Client, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	var zero Resp
	user := req.GetUserId()
	sent := req
	if c.tokens != nil && len(req.GetMinOffsets()) == 0 {
		p := partitioning.PartitionForKey([]byte(user), c.partitions)
		if off, ok := c.tokens.lookup(user, int32(p)); ok {
			sent = proto.Clone(req).(Req)
			set(sent, map[int32]int64{int32(p): off}, false)
			c.readsWithToken.Add(1)
		}
	}
	var last Req
	haveLast := false
	resp, _, err := c.failover(ctx, user, c.OwnersForUser(user), true,
		func(ctx context.Context, replica int, lastOwner bool, opts ...grpc.CallOption) (proto.Message, error) {
			r := sent
			if lastOwner {
				if !haveLast {
					last = proto.Clone(sent).(Req)
					set(last, nil, true)
					haveLast = true
				}
				r = last
			}
			return call(c.replicas[replica], ctx, r, opts...)
		})
	if err != nil {
		return zero, err
	}
	out := resp.(Resp)
	if out.GetStaleness().GetLagging() {
		c.lagging.Add(1)
	}
	return out, nil
}

// FilterRecalled sends the call to the user's owners (mode A).
func (c *RoutingClient) FilterRecalled(ctx context.Context, req *pb.FilterRecalledRequest) (*pb.FilterRecalledResponse, error) {
	return routedRead(c, ctx, req, func(r *pb.FilterRecalledRequest, m map[int32]int64, lag bool) {
		if m != nil {
			r.MinOffsets = m
		}
		if lag {
			r.AllowLagging = true
		}
	}, (*Client).FilterRecalled)
}

// GetFilter pulls the user's filter from its owners (mode B).
func (c *RoutingClient) GetFilter(ctx context.Context, req *pb.GetFilterRequest) (*pb.GetFilterResponse, error) {
	return routedRead(c, ctx, req, func(r *pb.GetFilterRequest, m map[int32]int64, lag bool) {
		if m != nil {
			r.MinOffsets = m
		}
		if lag {
			r.AllowLagging = true
		}
	}, (*Client).GetFilter)
}

// GetUserStats asks the user's owners.
func (c *RoutingClient) GetUserStats(ctx context.Context, req *pb.GetUserStatsRequest) (*pb.GetUserStatsResponse, error) {
	return routedRead(c, ctx, req, func(r *pb.GetUserStatsRequest, m map[int32]int64, lag bool) {
		if m != nil {
			r.MinOffsets = m
		}
		if lag {
			r.AllowLagging = true
		}
	}, (*Client).GetUserStats)
}

// Explain asks the user's owners.
func (c *RoutingClient) Explain(ctx context.Context, req *pb.ExplainRequest) (*pb.ExplainResponse, error) {
	return routedRead(c, ctx, req, func(r *pb.ExplainRequest, m map[int32]int64, lag bool) {
		if m != nil {
			r.MinOffsets = m
		}
		if lag {
			r.AllowLagging = true
		}
	}, (*Client).Explain)
}

// DeleteUser is a write (deleting twice deletes once): it fails over like
// a read.
func (c *RoutingClient) DeleteUser(ctx context.Context, req *pb.DeleteUserRequest) (*pb.DeleteUserResponse, error) {
	resp, _, err := c.failover(ctx, req.GetUserId(), c.OwnersForUser(req.GetUserId()), false,
		func(ctx context.Context, replica int, _ bool, opts ...grpc.CallOption) (proto.Message, error) {
			return c.replicas[replica].DeleteUser(ctx, req, opts...)
		})
	if err != nil {
		return nil, err
	}
	out := resp.(*pb.DeleteUserResponse)
	c.rememberWrite(req.GetUserId(), out.GetWrittenOffsets())
	return out, nil
}

// OwnerWrite is one owner's share of a routed RecordExposure.
type OwnerWrite struct {
	Replica   int   // owner 0 of these exposures
	Exposures []int // indices into the request's exposures
	WrittenBy int   // the owner that acknowledged them (-1 on failure)
	Response  *pb.RecordExposureResponse
	Err       error // nil when written
}

// RoutedRecordResult lists the owners' writes, ascending replica.
type RoutedRecordResult struct {
	Owners        []OwnerWrite
	ItemsRecorded uint64
}

// Err is the first owner's error, or nil when every share was written.
func (r *RoutedRecordResult) Err() error {
	for _, w := range r.Owners {
		if w.Err != nil {
			return w.Err
		}
	}
	return nil
}

// FailedExposures lists the indices of the exposures not written: resend
// them (recording is idempotent, so resending everything is safe too).
func (r *RoutedRecordResult) FailedExposures() []int {
	var out []int
	for _, w := range r.Owners {
		if w.Err != nil {
			out = append(out, w.Exposures...)
		}
	}
	return out
}

// WrittenOffsets merges the owners' written_offsets (highest per
// partition): a later read's min_offsets.
func (r *RoutedRecordResult) WrittenOffsets() map[int32]int64 {
	out := map[int32]int64{}
	for _, w := range r.Owners {
		for p, o := range w.Response.GetWrittenOffsets() {
			if cur, ok := out[p]; !ok || o > cur {
				out[p] = o
			}
		}
	}
	return out
}

// RecordExposure splits the batch by owner 0, one call per owner in
// ascending replica order; each share is all-or-nothing on its side and
// fails over to the next owner like a read.
func (c *RoutingClient) RecordExposure(ctx context.Context, req *pb.RecordExposureRequest) *RoutedRecordResult {
	n := len(c.replicas)
	byOwner := make([][]int, n)
	for i, e := range req.GetExposures() {
		r := partitioning.ReplicaForUser(e.GetUserId(), c.partitions, n)
		byOwner[r] = append(byOwner[r], i)
	}
	res := &RoutedRecordResult{}
	for r := 0; r < n; r++ {
		if len(byOwner[r]) == 0 {
			continue
		}
		w := OwnerWrite{Replica: r, Exposures: byOwner[r], WrittenBy: -1}
		part := &pb.RecordExposureRequest{Surface: req.GetSurface()}
		for _, i := range w.Exposures {
			part.Exposures = append(part.Exposures, req.Exposures[i])
		}
		// Users sharing owner 0 = r share every owner: (r + i) mod N.
		owners := partitioning.OwnersOfPartition(r, n, c.ReplicationFactor())
		resp, by, err := c.failover(ctx, req.Exposures[w.Exposures[0]].GetUserId(), owners, false,
			func(ctx context.Context, replica int, _ bool, opts ...grpc.CallOption) (proto.Message, error) {
				return c.replicas[replica].RecordExposure(ctx, part, opts...)
			})
		if err != nil {
			w.Err = fmt.Errorf("replica %d (%d exposures not written): %w", r, len(w.Exposures), err)
			res.Owners = append(res.Owners, w)
			continue
		}
		w.Response = resp.(*pb.RecordExposureResponse)
		w.WrittenBy = by
		for _, i := range w.Exposures {
			c.rememberWrite(req.Exposures[i].GetUserId(), w.Response.GetWrittenOffsets())
		}
		res.ItemsRecorded += w.Response.GetItemsRecorded()
		res.Owners = append(res.Owners, w)
	}
	return res
}

// GetServerStats asks every replica, in ordinal order.
func (c *RoutingClient) GetServerStats(ctx context.Context) ([]*pb.GetServerStatsResponse, error) {
	var all []*pb.GetServerStatsResponse
	for r, cl := range c.replicas {
		s, err := cl.GetServerStats(ctx)
		if err != nil {
			return nil, fmt.Errorf("replica %d: %w", r, err)
		}
		all = append(all, s)
	}
	return all, nil
}

func (c *RoutingClient) rememberWrite(userID string, written map[int32]int64) {
	if c.tokens == nil {
		return
	}
	p := int32(partitioning.PartitionForKey([]byte(userID), c.partitions))
	if off, ok := written[p]; ok {
		c.tokens.record(userID, p, off)
	}
}

// tokens: per user, the offset of its last write in its partition; past
// max users they fold into one offset per partition, which makes reads of
// that partition's users wait for the highest folded write (stricter,
// never weaker).
type tokens struct {
	mu     sync.Mutex
	max    int
	users  map[string]token
	folded map[int32]int64
}

type token struct {
	partition int32
	offset    int64
}

func newTokens(max int) *tokens {
	return &tokens{max: max, users: map[string]token{}, folded: map[int32]int64{}}
}

func (t *tokens) record(user string, p int32, off int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, ok := t.users[user]
	if ok && cur.offset >= off {
		return
	}
	if !ok && len(t.users) >= t.max {
		for _, tok := range t.users {
			if f, fok := t.folded[tok.partition]; !fok || tok.offset > f {
				t.folded[tok.partition] = tok.offset
			}
		}
		t.users = map[string]token{}
	}
	t.users[user] = token{p, off}
}

func (t *tokens) lookup(user string, p int32) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tok, ok := t.users[user]
	if f, fok := t.folded[p]; fok && (!ok || f > tok.offset) {
		return f, true
	}
	return tok.offset, ok
}
