// Package replica is mode B+ for Go recall servers: a local copy of each
// checked user's filter kept current by the server's Session stream
// (docs/session-stream.md).
//
// One Session stream to a server; each user checked is subscribed on first
// use, its filter arrives once (format 2, decoded by filterview) and every
// exposure the server applies for it after that is pushed as exact item
// hashes, so a check is a local computation with no call at all. Whenever
// the local copy cannot be trusted the check is answered through mode A
// instead, on the stream (or by the unary FilterRecalled while the stream is
// down): the copy is not synced (first snapshot, a sequence gap, a resync,
// an expired lease), the newest pong answers a ping sent more than
// MaxStaleness ago (or the server says it lags), or a slice held is at its
// expiry and the server's clock cannot be told from here. So a check never
// misses an exposure the server acknowledged more than MaxStaleness before
// it (the spec's guarantee).
//
//	r, err := replica.New(conn, replica.Options{}) // conn: efclient.Dial
//	defer r.Close()
//	keep, err := r.Check(ctx, "homefeed", "u1", []uint64{101, 102}, []string{"video:9"})
//
// The local answer is FilterRecalled's, with one difference in the safe
// direction: a fresh candidate that collides only with fingerprints the
// server recorded after the last snapshot is kept here and removed there (at
// most the FP mass those items add, within the surface's delta). A fresh
// snapshot (the replica compacts past CompactAfterItems pushed items) makes
// them identical again.
//
// Memory is bounded by MaxBytes (filters and pushed items of all users):
// past it the least recently checked user is unsubscribed and dropped. Safe
// for concurrent use: one goroutine reads the stream, one writes it, one
// pings; checks may come from any goroutine. One Replica per server (per
// owner, with scale-out).
package replica

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"exposurefilter/filterview"
	pb "exposurefilter/v1"
)

// Format is the filter format a snapshot carries.
const Format = 2

const (
	// Bytes a user costs beyond its filter's (the entry, its strings, the
	// map and list slots), and per pushed item (a map slot: hash and slice).
	entryOverheadBytes = 256
	pushedItemBytes    = 40
	// At most this many pings unanswered: a silent server is not made to
	// queue more; checks go to mode A (stale) until it answers.
	maxPingsInFlight = 256
)

// Options configure a Replica; zero fields take the defaults.
type Options struct {
	MaxBytes          int           // filters and pushed items held; default 256 MiB, at least 1 MiB
	MaxStaleness      time.Duration // a local answer needs a pong this young; default 100 ms
	PingInterval      time.Duration // < MaxStaleness; default 20 ms
	Timeout           time.Duration // first-use wait, and mode A, when ctx allows; default 500 ms
	CompactAfterItems int           // re-subscribe past this many pushed items; default 4096
	ReconnectBackoff  time.Duration // between stream attempts; default 100 ms
}

func (o *Options) fill() error {
	if o.MaxBytes == 0 {
		o.MaxBytes = 256 << 20
	}
	if o.MaxStaleness == 0 {
		o.MaxStaleness = 100 * time.Millisecond
	}
	if o.PingInterval == 0 {
		o.PingInterval = 20 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = 500 * time.Millisecond
	}
	if o.CompactAfterItems == 0 {
		o.CompactAfterItems = 4096
	}
	if o.ReconnectBackoff == 0 {
		o.ReconnectBackoff = 100 * time.Millisecond
	}
	if o.PingInterval <= 0 || o.PingInterval >= o.MaxStaleness {
		return fmt.Errorf("replica: need 0 < PingInterval < MaxStaleness (a healthy stream must stay fresh), got %v and %v", o.PingInterval, o.MaxStaleness)
	}
	if o.MaxBytes < 1<<20 || o.CompactAfterItems < 1 || o.Timeout < 0 || o.ReconnectBackoff < 0 {
		return fmt.Errorf("replica: need MaxBytes >= 1 MiB, CompactAfterItems >= 1, Timeout and ReconnectBackoff >= 0")
	}
	return nil
}

// Path is where a check's answer came from.
type Path int

const (
	Local  Path = iota // the local copy
	Stream             // mode A on the stream
	Unary              // mode A by the unary FilterRecalled (stream down)
)

func (p Path) String() string {
	return [...]string{"local", "stream", "unary"}[p]
}

// Error is a refusal or failure of a check: the server's gRPC code and
// message (an error on the stream, with its owner hint), or the replica's
// own DEADLINE_EXCEEDED / UNAVAILABLE / DATA_LOSS. status.Code and
// status.Convert read it.
type Error struct {
	Code      codes.Code
	Message   string
	OwnerHint string // SessionError.owner_hint, for another replica's user
	Err       error  // what caused it, if anything
}

func (e *Error) Error() string              { return e.Code.String() + ": " + e.Message }
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }
func (e *Error) Unwrap() error              { return e.Err }

func newError(c codes.Code, format string, args ...interface{}) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

// Stats are counters since New, and what is held now.
type Stats struct {
	LocalChecks, StreamChecks, UnaryChecks, FailedChecks int64
	// Why checks left the local path.
	NotSynced, Stale, Aging int64
	HitRatio                float64 // LocalChecks / checks answered
	Snapshots, NotModified  int64
	Pushes, PushedItems     int64
	Gaps, Resyncs, Resets   int64
	Expired, Compactions    int64
	Reconnects, Evictions   int64
	BytesHeld, UsersHeld    int
	// Subscribes sent and not yet answered (by a snapshot or an error); a
	// user forgotten or evicted takes its own off.
	SubscribesInFlight int
	// Now minus the send time of the newest ping answered; -1 before any.
	Staleness time.Duration
}

type key struct{ surface, user string }

// entry is one user's copy; guarded by Replica.mu.
type entry struct {
	key key
	// The last snapshot's filter (nil before the first and after a reset:
	// nothing claimed) and the same without the slices aged out.
	filter, view *filterview.FilterView
	version      string
	// Items pushed since the snapshot: hash -> newest slice index.
	pushed   map[uint64]int64
	sequence uint64
	// A snapshot and every push after it; no gap, resync, expiry or broken
	// stream since.
	synced bool
	// A subscribe was sent on the current stream and not ended since.
	subscribed, compacting bool
	refused                error
	retentionMs, spanMs    int64
	hasExpiry              bool
	nextExpiryMs           int64 // smallest server time at which a slice held ages out
	renewAt                time.Time
	subscribeID            uint64
	bytes                  int
	elem                   *list.Element
}

func (e *entry) updateExpiry() {
	e.hasExpiry = false
	set := func(end int64) {
		if x := end + e.retentionMs; !e.hasExpiry || x < e.nextExpiryMs {
			e.nextExpiryMs, e.hasExpiry = x, true
		}
	}
	if e.view != nil {
		for _, s := range e.view.Slices {
			set(s.EndMs)
		}
	}
	for _, sl := range e.pushed {
		set((sl + 1) * e.spanMs)
	}
}

// age drops what the server's clock, as far as it has shown it, has aged
// out.
func (e *entry) age(seenMs int64) {
	cutoff := seenMs - e.retentionMs
	if e.view != nil {
		e.view = e.view.Aged(cutoff)
	}
	for h, sl := range e.pushed {
		if (sl+1)*e.spanMs <= cutoff {
			delete(e.pushed, h)
		}
	}
	e.updateExpiry()
}

func (e *entry) cost() int {
	n := entryOverheadBytes + len(e.key.surface) + len(e.key.user) + len(e.pushed)*pushedItemBytes
	if e.filter != nil {
		n += e.filter.SizeBytes()
	}
	return n
}

type pending struct {
	done     chan struct{}
	mask     []byte
	err      error
	fallback bool // the stream ended first: the unary call
}

// Replica is the local filter replica of one server. See the package
// documentation.
type Replica struct {
	opts  Options
	stub  pb.ExposureFilterClient
	reMu  sync.Mutex // one reconnect at a time
	stop  chan struct{}
	pingW sync.WaitGroup

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every change
	nextID      uint64
	closing     bool
	stream      *stream
	reconnectAt time.Time
	lru         *list.List // of *entry, most recent first
	entries     map[key]*entry
	bytes       int
	// The server's clock: the largest server_time_ms received, and the
	// newest pong's with the monotonic time its ping was sent.
	seenMs     int64
	refMs      int64
	refSent    time.Time
	lagging    bool
	pings      map[uint64]time.Time
	subscribes map[uint64]*entry
	filters    map[uint64]*pending
	n          Stats
}

// New opens the stream to the server behind cc and starts pinging.
func New(cc grpc.ClientConnInterface, opts Options) (*Replica, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	r := &Replica{
		opts: opts, stub: pb.NewExposureFilterClient(cc), stop: make(chan struct{}),
		changed: make(chan struct{}), nextID: 1, lru: list.New(), entries: map[key]*entry{},
		pings: map[uint64]time.Time{}, subscribes: map[uint64]*entry{}, filters: map[uint64]*pending{},
	}
	r.Reconnect()
	r.pingW.Add(1)
	go r.pingLoop()
	return r, nil
}

// Check returns keep[i] (true: keep, never shown) for ids, then keys.
func (r *Replica) Check(ctx context.Context, surface, userID string, ids []uint64, keys []string) ([]bool, error) {
	keep, _, err := r.CheckPath(ctx, surface, userID, ids, keys)
	return keep, err
}

// CheckPath is Check, and where the answer came from. Errors are *Error
// (the server's code and message; an empty key is INVALID_ARGUMENT before
// any call; DEADLINE_EXCEEDED when no answer came in time) or the unary
// call's gRPC status error as it came.
func (r *Replica) CheckPath(ctx context.Context, surface, userID string, ids []uint64, keys []string) ([]bool, Path, error) {
	hashes := make([]uint64, 0, len(ids)+len(keys))
	for _, id := range ids {
		hashes = append(hashes, filterview.HashID(id))
	}
	for i, k := range keys {
		if k == "" {
			return nil, Local, newError(codes.InvalidArgument, "candidate_keys[%d]: empty", i)
		}
		hashes = append(hashes, filterview.HashKey(k))
	}
	wctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	r.mu.Lock()
	e := r.getOrCreate(key{surface, userID})
	s := r.liveStream()
	now := time.Now()
	first := false
	if s != nil && !e.subscribed {
		first = e.filter == nil && !e.synced
		r.subscribe(e, s)
	} else if s != nil && e.synced && now.After(e.renewAt) {
		// Renew the lease before it runs out; the fresh snapshot also
		// compacts.
		r.subscribe(e, s)
	}
	if first {
		// First use: the snapshot, and the pong of the ping sent right
		// behind the subscribe, are one round trip away.
		for !e.synced && e.refused == nil && e.subscribed && r.wait(wctx) {
		}
		for (r.refSent.IsZero() || r.refSent.Before(now)) && r.liveStream() != nil && r.wait(wctx) {
		}
	}
	view, pushedHit, ok := r.localCopy(e, hashes)
	if ok {
		r.n.LocalChecks++
	}
	r.mu.Unlock()
	if ok {
		// The view is never changed in place (aging and snapshots replace
		// it), so it is read without the lock.
		return keepMask(view, hashes, pushedHit), Local, nil
	}
	keep, path, err := r.modeA(ctx, surface, userID, ids, keys)
	if err != nil {
		r.mu.Lock()
		r.n.FailedChecks++
		r.mu.Unlock()
	}
	return keep, path, err
}

// Sync returns once a ping sent now is answered: every write the server
// had acknowledged before the call is then in the local copies of synced
// users (or the replica knows they are not synced).
func (r *Replica) Sync(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.liveStream()
	if s == nil {
		return newError(codes.Unavailable, "session: the stream is down")
	}
	sent := time.Now()
	if !r.sendPing(s) {
		return newError(codes.Unavailable, "session: too many pings unanswered")
	}
	for r.refSent.IsZero() || r.refSent.Before(sent) {
		if r.liveStream() != s {
			return newError(codes.Unavailable, "session: the stream ended")
		}
		if !r.wait(wctx) {
			return &Error{Code: codes.DeadlineExceeded, Message: "session: no pong in time", Err: wctx.Err()}
		}
	}
	return nil
}

// Forget drops the user's copy and unsubscribes it; the next check
// subscribes again.
func (r *Replica) Forget(surface, userID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.entries[key{surface, userID}]; ok {
		r.remove(e)
		r.drop(e)
	}
}

// Reconnect ends the stream and opens a new one: every user is answered
// through mode A until its new snapshot. Done on its own when the stream
// ends, or when pings go unanswered for 10 x MaxStaleness (at least 1 s).
func (r *Replica) Reconnect() {
	r.reMu.Lock()
	defer r.reMu.Unlock()
	r.mu.Lock()
	old := r.stream
	r.mu.Unlock()
	if old != nil {
		// Still the current stream while it ends, so onEnded unsyncs every
		// user and fails over the requests waiting on it.
		old.cancel()
		select {
		case <-old.done:
		case <-time.After(5 * time.Second):
		}
		r.mu.Lock()
		r.n.Reconnects++
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return
	}
	s := newStream(r)
	r.stream = s
	r.refSent = time.Time{} // nothing vouched for yet
	r.pings = map[uint64]time.Time{}
	r.reconnectAt = time.Now().Add(r.opts.ReconnectBackoff)
	go s.run()
}

// Close half-closes the stream (the server ends it with OK) and stops the
// goroutines.
func (r *Replica) Close() error {
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return nil
	}
	r.closing = true
	s := r.stream
	r.notify()
	r.mu.Unlock()
	close(r.stop)
	r.pingW.Wait()
	r.reMu.Lock()
	defer r.reMu.Unlock()
	if s != nil {
		s.closeWrites()
		select {
		case <-s.done:
		case <-time.After(time.Second):
		}
		s.cancel()
		<-s.done
	}
	return nil
}

// Stats returns the counters and what is held now.
func (r *Replica) Stats() Stats {
	r.mu.Lock()
	s := r.n
	s.BytesHeld = r.bytes
	s.UsersHeld = len(r.entries)
	s.SubscribesInFlight = len(r.subscribes)
	s.Staleness = -1
	if !r.refSent.IsZero() {
		s.Staleness = time.Since(r.refSent)
	}
	r.mu.Unlock()
	if answered := s.LocalChecks + s.StreamChecks + s.UnaryChecks; answered > 0 {
		s.HitRatio = float64(s.LocalChecks) / float64(answered)
	}
	return s
}

// --- Checks (mu held where noted) ---

// notify wakes every waiter. mu held.
func (r *Replica) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// wait releases mu until a change or ctx's end; false once ctx ended.
// mu held.
func (r *Replica) wait(ctx context.Context) bool {
	ch := r.changed
	r.mu.Unlock()
	defer r.mu.Lock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *Replica) liveStream() *stream {
	if r.stream != nil && !r.stream.ended {
		return r.stream
	}
	return nil
}

func (r *Replica) fresh(now time.Time) bool {
	return r.liveStream() != nil && !r.lagging && !r.refSent.IsZero() &&
		now.Sub(r.refSent) <= r.opts.MaxStaleness
}

// localCopy returns the view to answer from and the candidates pushed
// since the snapshot, or ok false (counted) when the copy cannot be
// trusted. mu held.
func (r *Replica) localCopy(e *entry, hashes []uint64) (view *filterview.FilterView, pushedHit []int, ok bool) {
	now := time.Now()
	if !e.synced {
		r.n.NotSynced++
		return nil, nil, false
	}
	if !r.fresh(now) {
		r.n.Stale++
		return nil, nil, false
	}
	if e.hasExpiry && e.nextExpiryMs <= r.seenMs {
		e.age(r.seenMs)
		r.account(e)
	}
	// The latest the server's clock can read now: it read the ping after
	// it was sent (equal clock rates).
	upper := r.refMs + now.Sub(r.refSent).Milliseconds() + 1
	if e.hasExpiry && e.nextExpiryMs <= upper {
		// A slice at its expiry: whether the server still holds it cannot
		// be told until a pong shows its clock past it.
		r.n.Aging++
		return nil, nil, false
	}
	if len(e.pushed) > 0 {
		for i, h := range hashes {
			if _, hit := e.pushed[h]; hit {
				pushedHit = append(pushedHit, i)
			}
		}
	}
	return e.view, pushedHit, true
}

// keepMask is the local answer: not claimed by a live slice of the
// snapshot's filter, and not pushed since.
func keepMask(view *filterview.FilterView, hashes []uint64, pushedHit []int) []bool {
	var keep []bool
	if view != nil {
		keep = view.KeepMaskHashes(hashes)
	} else {
		keep = make([]bool, len(hashes))
		for i := range keep {
			keep[i] = true
		}
	}
	for _, i := range pushedHit {
		keep[i] = false
	}
	return keep
}

func unpack(mask []byte, n int) ([]bool, error) {
	if len(mask) != (n+7)/8 {
		return nil, newError(codes.Internal, "keep_mask of %d bytes for %d candidates", len(mask), n)
	}
	keep := make([]bool, n)
	for i := range keep {
		keep[i] = mask[i>>3]>>(i&7)&1 == 1
	}
	return keep, nil
}

func (r *Replica) modeA(ctx context.Context, surface, userID string, ids []uint64, keys []string) ([]bool, Path, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	req := &pb.FilterRecalledRequest{Surface: surface, UserId: userID, CandidateIds: ids,
		CandidateKeys: keys, Mode: pb.ResultMode_KEEP_MASK}
	n := len(ids) + len(keys)
	r.mu.Lock()
	if s := r.liveStream(); s != nil {
		id := r.takeID()
		p := &pending{done: make(chan struct{})}
		r.filters[id] = p
		s.send(&pb.SessionRequest{RequestId: id, Kind: &pb.SessionRequest_Filter{Filter: req}})
		r.mu.Unlock()
		select {
		case <-p.done:
		case <-ctx.Done():
			r.mu.Lock()
			delete(r.filters, id)
			r.mu.Unlock()
			return nil, Stream, &Error{Code: codes.DeadlineExceeded, Message: "session: no answer to filter in time", Err: ctx.Err()}
		}
		if p.err != nil {
			return nil, Stream, p.err
		}
		if !p.fallback {
			keep, err := unpack(p.mask, n)
			if err == nil {
				r.mu.Lock()
				r.n.StreamChecks++
				r.mu.Unlock()
			}
			return keep, Stream, err
		}
		// The stream ended before the answer: the unary call.
	} else {
		r.mu.Unlock()
	}
	resp, err := r.stub.FilterRecalled(ctx, req)
	if err != nil {
		return nil, Unary, err
	}
	keep, err := unpack(resp.GetKeepMask(), n)
	if err == nil {
		r.mu.Lock()
		r.n.UnaryChecks++
		r.mu.Unlock()
	}
	return keep, Unary, err
}

// --- The copies held (mu held) ---

func (r *Replica) takeID() uint64 {
	id := r.nextID
	r.nextID++
	return id
}

func (r *Replica) getOrCreate(k key) *entry {
	if e, ok := r.entries[k]; ok {
		r.lru.MoveToFront(e.elem)
		return e
	}
	e := &entry{key: k, spanMs: 1, pushed: map[uint64]int64{}}
	e.elem = r.lru.PushFront(e)
	r.entries[k] = e
	r.account(e)
	return e
}

// subscribe sends a subscribe with the version held, and a ping right
// behind it: its pong comes just after the snapshot and makes a first
// check fresh without waiting for the pinger.
func (r *Replica) subscribe(e *entry, s *stream) {
	id := r.takeID()
	e.subscribed = true
	e.refused = nil
	if e.subscribeID != 0 {
		delete(r.subscribes, e.subscribeID)
	}
	e.subscribeID = id
	r.subscribes[id] = e
	s.send(&pb.SessionRequest{RequestId: id, Kind: &pb.SessionRequest_Subscribe{Subscribe: &pb.SessionSubscribe{
		Surface: e.key.surface, UserId: e.key.user, IfVersion: e.version, AcceptedFormats: []uint32{Format}}}})
	r.sendPing(s)
}

func (r *Replica) sendPing(s *stream) bool {
	if len(r.pings) >= maxPingsInFlight {
		return false
	}
	id := r.takeID()
	r.pings[id] = time.Now()
	s.send(&pb.SessionRequest{RequestId: id, Kind: &pb.SessionRequest_Ping{Ping: &pb.SessionPing{}}})
	return true
}

// account re-accounts e's bytes and evicts the least recently checked
// users beyond MaxBytes.
func (r *Replica) account(e *entry) {
	if r.entries[e.key] != e {
		return // evicted since
	}
	c := e.cost()
	r.bytes += c - e.bytes
	e.bytes = c
	for r.bytes > r.opts.MaxBytes && len(r.entries) > 1 {
		victim := r.lru.Back().Value.(*entry)
		r.remove(victim)
		r.n.Evictions++
		r.drop(victim)
	}
}

func (r *Replica) remove(e *entry) {
	r.lru.Remove(e.elem)
	delete(r.entries, e.key)
	r.bytes -= e.bytes
	e.bytes = 0
}

func (r *Replica) drop(e *entry) {
	e.synced = false
	if e.subscribeID != 0 {
		// A subscribe still unanswered: its answer will find no entry, so
		// nothing else would take its id off the map while the stream lasts.
		delete(r.subscribes, e.subscribeID)
		e.subscribeID = 0
	}
	if s := r.liveStream(); e.subscribed && s != nil {
		// Quiet: no answer wanted. The user is no longer held, so its
		// pushes still in flight are dropped (onPush), and a refused
		// unsubscribe's error matches no request waited for (onAnswer).
		s.send(&pb.SessionRequest{RequestId: r.takeID(), Kind: &pb.SessionRequest_Unsubscribe{
			Unsubscribe: &pb.SessionUnsubscribe{Surface: e.key.surface, UserId: e.key.user, Quiet: true}}})
	}
	e.subscribed = false
}

// --- What the stream brings (reader goroutine) ---

func (r *Replica) onResponse(s *stream, m *pb.SessionResponse) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s != r.stream {
		return // a stream replaced since
	}
	switch k := m.Kind.(type) {
	case *pb.SessionResponse_Snapshot:
		r.onSnapshot(k.Snapshot)
	case *pb.SessionResponse_Push:
		r.onPush(k.Push, s)
	case *pb.SessionResponse_Filter:
		r.onAnswer(m.RequestId, k.Filter.GetKeepMask(), nil)
	case *pb.SessionResponse_Error:
		err := &Error{Code: codes.Code(k.Error.GetCode()), Message: k.Error.GetMessage(), OwnerHint: k.Error.GetOwnerHint()}
		r.onAnswer(m.RequestId, nil, err)
	case *pb.SessionResponse_Pong:
		r.onPong(m.RequestId, k.Pong)
	case *pb.SessionResponse_Resync:
		r.n.Resyncs++
		r.markAllUnsynced(false)
	case *pb.SessionResponse_Unsubscribed:
		u := k.Unsubscribed
		if u.GetReason() == pb.SessionUnsubscribed_IDLE {
			r.n.Expired++
			if e, ok := r.entries[key{u.GetSurface(), u.GetUserId()}]; ok {
				e.subscribed = false
				e.synced = false
			}
		}
	}
	r.notify()
}

func (r *Replica) onAnswer(id uint64, mask []byte, err *Error) {
	if p, ok := r.filters[id]; ok {
		delete(r.filters, id)
		p.mask = mask
		if err != nil {
			p.err = err
		}
		close(p.done)
		return
	}
	if e, ok := r.subscribes[id]; ok {
		delete(r.subscribes, id)
		if err != nil {
			e.refused = err
			e.subscribeID = 0
			e.subscribed = false
			e.synced = false
		}
	}
}

func (r *Replica) onPong(id uint64, p *pb.SessionPong) {
	sent, ok := r.pings[id]
	if !ok {
		return
	}
	// Older pings are answered already or never will be (FIFO).
	for i, t := range r.pings {
		if !t.After(sent) {
			delete(r.pings, i)
		}
	}
	if r.refSent.IsZero() || !sent.Before(r.refSent) {
		r.refSent = sent
		r.refMs = p.GetServerTimeMs()
		r.lagging = p.GetLagging()
	}
	if t := p.GetServerTimeMs(); t > r.seenMs {
		r.seenMs = t
	}
}

func (r *Replica) onSnapshot(s *pb.SessionSnapshot) {
	if t := s.GetServerTimeMs(); t > r.seenMs {
		r.seenMs = t
	}
	e, ok := r.entries[key{s.GetSurface(), s.GetUserId()}]
	if !ok {
		return // evicted since it was subscribed
	}
	// A snapshot is the one for its user, whatever its request_id (a
	// queued or resync snapshot comes with 0).
	delete(r.subscribes, e.subscribeID)
	e.subscribeID = 0
	r.n.Snapshots++
	untrusted := func(format string, args ...interface{}) {
		e.synced, e.subscribed = false, false
		e.refused = newError(codes.DataLoss, format, args...)
	}
	if s.GetNotModified() {
		r.n.NotModified++
		if e.filter == nil || s.GetVersion() != e.version {
			// not_modified for a version not held (a reset since, or a
			// server bug): not trusted.
			untrusted("session: not_modified for version %q, not held", s.GetVersion())
			return
		}
	} else {
		view, err := filterview.Parse(s.GetFilter())
		if err != nil {
			// Never used: mode A until a good snapshot arrives.
			untrusted("session: snapshot: %v", err)
			e.refused.(*Error).Err = err
			return
		}
		if view.Version() != s.GetVersion() {
			untrusted("session: snapshot: checksum %s is not the version %q", view.Version(), s.GetVersion())
			return
		}
		e.filter = view
		e.version = s.GetVersion()
	}
	e.view = e.filter
	e.pushed = map[uint64]int64{}
	e.sequence = s.GetSequence()
	e.retentionMs = s.GetRetentionMs()
	e.spanMs = s.GetSliceSpanMs()
	if e.spanMs < 1 {
		e.spanMs = 1
	}
	e.synced, e.subscribed, e.compacting = true, true, false
	e.refused = nil
	e.renewAt = time.Now().Add(time.Duration(s.GetIdleTimeoutMs()) * time.Millisecond / 2)
	e.updateExpiry()
	r.account(e)
}

func (r *Replica) onPush(p *pb.SessionPush, s *stream) {
	e, ok := r.entries[key{p.GetSurface(), p.GetUserId()}]
	if !ok || !e.synced || p.GetSequence() <= e.sequence {
		return
	}
	r.n.Pushes++
	if p.GetSequence() != e.sequence+1 {
		// A gap: something was lost. Not trusted until a new snapshot.
		r.n.Gaps++
		e.synced = false
		r.subscribe(e, s)
		return
	}
	e.sequence = p.GetSequence()
	if p.GetReset_() {
		r.n.Resets++
		e.filter, e.view, e.version = nil, nil, ""
		e.pushed = map[uint64]int64{}
	} else {
		r.n.PushedItems += int64(len(p.GetItemHashes()))
		sl := p.GetEventTimeMs() / e.spanMs
		for _, h := range p.GetItemHashes() {
			if old, ok := e.pushed[h]; !ok || old < sl {
				e.pushed[h] = sl
			}
		}
		if len(e.pushed) >= r.opts.CompactAfterItems && !e.compacting {
			r.n.Compactions++
			e.compacting = true
			r.subscribe(e, s)
		}
	}
	e.updateExpiry()
	r.account(e)
}

func (r *Replica) markAllUnsynced(unsubscribed bool) {
	for _, e := range r.entries {
		e.synced = false
		if unsubscribed {
			e.subscribed = false
		}
	}
}

func (r *Replica) onEnded(s *stream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.ended = true
	if s != r.stream {
		return
	}
	for id, p := range r.filters {
		p.fallback = true // no answer, no error: the unary call
		close(p.done)
		delete(r.filters, id)
	}
	r.subscribes = map[uint64]*entry{}
	r.pings = map[uint64]time.Time{}
	r.reconnectAt = time.Now().Add(r.opts.ReconnectBackoff)
	r.markAllUnsynced(true)
	r.notify()
}

// --- Pinger ---

func (r *Replica) pingLoop() {
	defer r.pingW.Done()
	// Pings unanswered this long: the server or the connection is stuck (a
	// broken connection can take keepalive's minutes to notice).
	silence := 10 * r.opts.MaxStaleness
	if silence < time.Second {
		silence = time.Second
	}
	t := time.NewTicker(r.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		reconnect := false
		r.mu.Lock()
		now := time.Now()
		if s := r.liveStream(); s == nil {
			reconnect = !now.Before(r.reconnectAt)
		} else {
			for _, sent := range r.pings {
				if now.Sub(sent) > silence {
					reconnect = true
					break
				}
			}
			if !reconnect && len(r.entries) > 0 {
				r.sendPing(s)
			}
		}
		r.mu.Unlock()
		if reconnect {
			r.Reconnect()
		}
	}
}

// --- One Session call ---

// stream is one Session call: a queue feeds the writer goroutine (so no
// lock is held while gRPC's flow control blocks a send), the reader hands
// each response to the replica.
type stream struct {
	r      *Replica
	ctx    context.Context
	cancel context.CancelFunc
	ended  bool // Replica.mu
	done   chan struct{}

	qmu    sync.Mutex
	q      []*pb.SessionRequest
	closed bool
	wake   chan struct{}
}

func newStream(r *Replica) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	return &stream{r: r, ctx: ctx, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1)}
}

func (s *stream) send(m *pb.SessionRequest) {
	s.qmu.Lock()
	if !s.closed {
		s.q = append(s.q, m)
	}
	s.qmu.Unlock()
	s.signal()
}

func (s *stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *stream) closeWrites() {
	s.qmu.Lock()
	s.closed = true
	s.qmu.Unlock()
	s.signal()
}

func (s *stream) run() {
	defer close(s.done)
	defer s.cancel()
	cs, err := s.r.stub.Session(s.ctx)
	if err != nil {
		s.r.onEnded(s)
		return
	}
	go s.write(cs)
	for {
		m, err := cs.Recv()
		if err != nil {
			s.r.onEnded(s)
			return
		}
		s.r.onResponse(s, m)
	}
}

func (s *stream) write(cs pb.ExposureFilter_SessionClient) {
	for {
		s.qmu.Lock()
		batch, closed := s.q, s.closed
		s.q = nil
		s.qmu.Unlock()
		for _, m := range batch {
			if cs.Send(m) != nil {
				return // the reader sees the status
			}
		}
		if closed {
			if len(batch) == 0 {
				_ = cs.CloseSend()
				return
			}
			continue // flush what came with the close
		}
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			return
		}
	}
}
