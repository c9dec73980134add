package replica

import (
	"bufio"
	"container/list"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/prototext"

	"exposurefilter/filterview"
	pb "exposurefilter/v1"
)

// replay feeds one golden transcript (tests/testdata/session/, the real
// server's answers) through the replica's message handling: the
// replica makes the transcript's subscribes and unsubscribes itself, the
// server's answers are delivered as recorded (request ids mapped to the
// replica's own; mode-A answers and answers to requests the replica never
// makes are skipped). After every answer each user held is compared with
// what the transcript's server holds (the `! record` / `! delete` lines):
// a synced user answers every id the transcript names, and fresh ones,
// exactly; a user the server stopped serving is not answered locally.
// Every push's hashes are the Go hashes of the ids recorded, and every
// snapshot decodes to its version.
type replay struct {
	t        *testing.T
	name     string
	r        *Replica
	s        *stream
	ids      map[uint64]uint64 // transcript request id -> replica's (0: none)
	held     map[key]map[uint64]bool
	named    map[uint64]bool
	recorded []uint64
	checked  int
	quiet    bool // the last unsubscribe sent() returned was quiet
}

func newReplay(t *testing.T, name string) *replay {
	o := Options{MaxStaleness: time.Minute, PingInterval: time.Second}
	if err := o.fill(); err != nil {
		t.Fatal(err)
	}
	r := &Replica{opts: o, changed: make(chan struct{}), nextID: 1, lru: list.New(), entries: map[key]*entry{},
		pings: map[uint64]time.Time{}, subscribes: map[uint64]*entry{}, filters: map[uint64]*pending{}}
	s := newStream(r) // never run: what the replica sends stays queued
	r.stream = s
	rp := &replay{t: t, name: name, r: r, s: s, ids: map[uint64]uint64{}, held: map[key]map[uint64]bool{}, named: map[uint64]bool{}}
	for i := uint64(1000); i < 1064; i++ {
		rp.named[i] = true
	}
	return rp
}

// sent returns the id of the last request of the kind queued, and clears
// the queue.
func (rp *replay) sent(kind string) uint64 {
	rp.s.qmu.Lock()
	defer rp.s.qmu.Unlock()
	var id uint64
	for _, m := range rp.s.q {
		switch m.Kind.(type) {
		case *pb.SessionRequest_Subscribe:
			if kind == "subscribe" {
				id = m.RequestId
			}
		case *pb.SessionRequest_Unsubscribe:
			if kind == "unsubscribe" {
				id = m.RequestId
				rp.quiet = m.GetUnsubscribe().GetQuiet()
			}
		}
	}
	rp.s.q = nil
	return id
}

func (rp *replay) request(m *pb.SessionRequest) {
	var id uint64
	switch k := m.Kind.(type) {
	case *pb.SessionRequest_Subscribe:
		rp.r.mu.Lock()
		e := rp.r.getOrCreate(key{k.Subscribe.Surface, k.Subscribe.UserId})
		rp.r.subscribe(e, rp.s)
		rp.r.mu.Unlock()
		id = rp.sent("subscribe")
	case *pb.SessionRequest_Unsubscribe:
		u := k.Unsubscribe
		rp.r.mu.Lock()
		e, ok := rp.r.entries[key{u.Surface, u.UserId}]
		subscribed := ok && e.subscribed
		rp.r.mu.Unlock()
		if subscribed {
			rp.r.Forget(u.Surface, u.UserId)
			id = rp.sent("unsubscribe")
		}
		// The replica's unsubscribes are quiet, whatever the transcript's;
		// the answer recorded for one that is not is delivered all the
		// same and must change nothing.
		if id != 0 && !rp.quiet {
			rp.t.Fatalf("%s: the replica's unsubscribe of %q is not quiet", rp.name, u.UserId)
		}
	}
	// ping: the freshness is set by compare; filter and none-set: not
	// the replica's requests.
	rp.ids[m.RequestId] = id
}

func (rp *replay) response(m *pb.SessionResponse) {
	if m.RequestId != 0 {
		id := rp.ids[m.RequestId]
		if id == 0 {
			return // the answer to a request the replica did not make
		}
		m.RequestId = id
	}
	switch k := m.Kind.(type) {
	case *pb.SessionResponse_Pong:
		return
	case *pb.SessionResponse_Snapshot:
		if !k.Snapshot.NotModified {
			v, err := filterview.Parse(k.Snapshot.Filter)
			if err != nil || v.Version() != k.Snapshot.Version {
				rp.t.Fatalf("%s: snapshot of version %q: %v", rp.name, k.Snapshot.Version, err)
			}
		}
	case *pb.SessionResponse_Push:
		if !k.Push.Reset_ {
			var want []uint64
			for _, id := range rp.recorded {
				want = append(want, filterview.HashID(id))
			}
			if len(want) != len(k.Push.ItemHashes) {
				rp.t.Fatalf("%s: push %v, recorded %v", rp.name, k.Push.ItemHashes, rp.recorded)
			}
			for i := range want {
				if want[i] != k.Push.ItemHashes[i] {
					rp.t.Fatalf("%s: push hashes %v, Go hashes of %v are %v", rp.name, k.Push.ItemHashes, rp.recorded, want)
				}
			}
		}
	}
	rp.recorded = nil
	rp.r.onResponse(rp.s, m)
	rp.sent("") // a gap's or compaction's subscribe would be dropped here
	rp.compare()
}

func (rp *replay) action(words []string) {
	unq := func(s string) string { return strings.Trim(s, `"`) }
	switch words[0] {
	case "record":
		k := key{unq(words[1]), unq(words[2])}
		if rp.held[k] == nil {
			rp.held[k] = map[uint64]bool{}
		}
		rp.recorded = nil
		for _, w := range words[4:] {
			id, err := strconv.ParseUint(w, 10, 64)
			if err != nil {
				rp.t.Fatal(err)
			}
			rp.held[k][id] = true
			rp.named[id] = true
			rp.recorded = append(rp.recorded, id)
		}
	case "delete":
		delete(rp.held, key{unq(words[1]), unq(words[2])})
	}
	// advance, tick: the server's clock; it shows in its answers.
}

func (rp *replay) compare() {
	var cands []uint64
	for id := range rp.named {
		cands = append(cands, id)
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i] < cands[j] })
	hashes := make([]uint64, len(cands))
	for i, c := range cands {
		hashes[i] = filterview.HashID(c)
	}
	r := rp.r
	r.mu.Lock()
	defer r.mu.Unlock()
	// Fresh: a pong just now, at the largest server time seen.
	r.refSent, r.refMs, r.lagging = time.Now(), r.seenMs, false
	for k, e := range r.entries {
		view, hit, ok := r.localCopy(e, hashes)
		if !(e.synced && e.subscribed) {
			if ok {
				rp.t.Fatalf("%s: %v answered locally while not synced", rp.name, k)
			}
			continue
		}
		if !ok {
			rp.t.Fatalf("%s: %v synced but not answered locally", rp.name, k)
		}
		keep := keepMask(view, hashes, hit)
		for i, c := range cands {
			if keep[i] == rp.held[k][c] {
				rp.t.Fatalf("%s: %v: candidate %d kept %v, server holds %v", rp.name, k, c, keep[i], rp.held[k][c])
			}
		}
		rp.checked += len(cands)
	}
}

func (rp *replay) run() *replay {
	f, err := os.Open(filepath.Join(testdata(rp.t), "session", rp.name))
	if err != nil {
		rp.t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "> "):
			m := &pb.SessionRequest{}
			if err := prototext.Unmarshal([]byte(line[2:]), m); err != nil {
				rp.t.Fatalf("%s: %v: %s", rp.name, err, line)
			}
			rp.request(m)
		case strings.HasPrefix(line, "< "):
			m := &pb.SessionResponse{}
			if err := prototext.Unmarshal([]byte(line[2:]), m); err != nil {
				rp.t.Fatalf("%s: %v: %s", rp.name, err, line)
			}
			rp.response(m)
		case strings.HasPrefix(line, "! "):
			rp.action(strings.Fields(line[2:]))
		}
	}
	if err := sc.Err(); err != nil {
		rp.t.Fatal(err)
	}
	return rp
}

func TestTranscriptSubscribeAndPush(t *testing.T) {
	rp := newReplay(t, "subscribe_and_push.transcript").run()
	s := rp.r.Stats()
	if s.Snapshots != 2 || s.Pushes != 3 || s.Resets != 1 || s.Gaps != 0 || rp.checked == 0 {
		t.Fatalf("stats %+v, %d candidates compared", s, rp.checked)
	}
}

func TestTranscriptFilterVersionsAndLeases(t *testing.T) {
	rp := newReplay(t, "filter_versions_and_leases.transcript").run()
	s := rp.r.Stats()
	if s.Snapshots != 3 || s.NotModified != 1 || s.Expired != 1 || rp.checked == 0 {
		t.Fatalf("stats %+v, %d candidates compared", s, rp.checked)
	}
}

func TestTranscriptErrors(t *testing.T) {
	rp := newReplay(t, "errors.transcript").run()
	refused := map[key]*Error{}
	for k, e := range rp.r.entries {
		if e.refused != nil {
			refused[k] = e.refused.(*Error)
		}
	}
	if e := refused[key{"homefeed", ""}]; e == nil || e.Code != codes.InvalidArgument || e.Message != "subscribe.user_id: empty" {
		t.Fatalf("refused %v", refused)
	}
	if e := refused[key{"", "d"}]; e == nil || e.Code != codes.ResourceExhausted {
		t.Fatalf("refused %v", refused)
	}
	if rp.checked == 0 {
		t.Fatal("nothing compared")
	}
}

func TestTranscriptQuietUnsubscribe(t *testing.T) {
	// Nothing answers the quiet unsubscribe, and nothing the replica
	// holds depends on an answer; the refused one (user_id empty) is not
	// the replica's request (it holds no such user).
	rp := newReplay(t, "quiet_unsubscribe.transcript").run()
	s := rp.r.Stats()
	if _, held := rp.r.entries[key{"homefeed", "u1"}]; s.Snapshots != 1 || s.Pushes != 0 || held || rp.checked == 0 {
		t.Fatalf("stats %+v, u1 held %v, %d candidates compared", s, held, rp.checked)
	}
}

func TestEveryTranscriptIsReplayed(t *testing.T) {
	names, err := filepath.Glob(filepath.Join(testdata(t), "session", "*.transcript"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range names {
		got = append(got, filepath.Base(n))
	}
	want := []string{"errors.transcript", "filter_versions_and_leases.transcript", "quiet_unsubscribe.transcript", "subscribe_and_push.transcript"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("transcripts %v, replayed %v", got, want)
	}
}
