package efclient

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"exposurefilter/filterview"
	pb "exposurefilter/v1"
)

// FilterGetter is what FilterCache pulls through: a *Client (one server)
// or a *RoutingClient (the user's owners, with failover and
// read-your-writes tokens).
type FilterGetter interface {
	GetFilter(ctx context.Context, req *pb.GetFilterRequest) (*pb.GetFilterResponse, error)
}

type plainGetter struct{ c *Client }

func (g plainGetter) GetFilter(ctx context.Context, req *pb.GetFilterRequest) (*pb.GetFilterResponse, error) {
	return g.c.GetFilter(ctx, req)
}

// Getter adapts a *Client to FilterGetter.
func (c *Client) Getter() FilterGetter { return plainGetter{c} }

// CacheStats are monotonic counters, plus what the cache holds now.
type CacheStats struct {
	FullPulls   int64 // answers with bytes
	NotModified int64 // answers that the held version is current
	Errors      int64 // failed calls and rejected bytes
	Evictions   int64
	Users       int
	Bytes       int
}

// FilterCache is pull mode (mode B): the last filter of each (surface,
// user), revalidated on every Get with if_version (an unchanged filter
// costs one small round trip and no bytes). Bytes that do not parse, or
// whose checksum is not the announced version, are an error with code
// DATA_LOSS and are never cached. Bounded by MaxBytes (the filters' bytes
// and their decoded fingerprints, filterview.FilterView.SizeBytes), least
// recently used out first. Safe for concurrent use.
type FilterCache struct {
	src      FilterGetter
	maxBytes int

	mu    sync.Mutex
	lru   *list.List // of *cacheEntry, most recent first
	byKey map[cacheKey]*list.Element
	bytes int
	stats CacheStats
}

type cacheKey struct{ surface, user string }

type cacheEntry struct {
	key  cacheKey
	view *filterview.FilterView
	size int
}

// NewFilterCache pulls through src, holding at most maxBytes (default
// 256 MiB when <= 0). A filter larger than maxBytes is returned, not held.
func NewFilterCache(src FilterGetter, maxBytes int) *FilterCache {
	if maxBytes <= 0 {
		maxBytes = 256 << 20
	}
	return &FilterCache{src: src, maxBytes: maxBytes, lru: list.New(), byKey: map[cacheKey]*list.Element{}}
}

func dataLoss(format string, args ...interface{}) error {
	return status.Errorf(codes.DataLoss, format, args...)
}

// Get returns the user's current filter: the held one if the server says
// it is unchanged, else the newly pulled one.
func (c *FilterCache) Get(ctx context.Context, surface, userID string) (*filterview.FilterView, error) {
	key := cacheKey{surface, userID}
	c.mu.Lock()
	var held *filterview.FilterView
	if e, ok := c.byKey[key]; ok {
		held = e.Value.(*cacheEntry).view
	}
	c.mu.Unlock()
	req := &pb.GetFilterRequest{Surface: surface, UserId: userID, AcceptedFormats: filterview.FormatVersions}
	if held != nil {
		req.IfVersion = held.Version()
	}
	resp, err := c.src.GetFilter(ctx, req)
	if err != nil {
		c.count(func(s *CacheStats) { s.Errors++ })
		return nil, err
	}
	if resp.GetNotModified() {
		if held == nil || resp.GetVersion() != held.Version() {
			c.count(func(s *CacheStats) { s.Errors++ })
			return nil, dataLoss("GetFilter(%s, %s): not_modified for version %q, which this cache does not hold", surface, userID, resp.GetVersion())
		}
		c.mu.Lock()
		c.stats.NotModified++
		if e, ok := c.byKey[key]; ok {
			c.lru.MoveToFront(e)
		}
		c.mu.Unlock()
		return held, nil
	}
	view, err := filterview.Parse(resp.GetFilter())
	if err != nil {
		c.count(func(s *CacheStats) { s.Errors++ })
		return nil, &cacheError{status.New(codes.DataLoss, fmt.Sprintf("GetFilter(%s, %s): %v", surface, userID, err)), err}
	}
	if view.Version() != resp.GetVersion() {
		c.count(func(s *CacheStats) { s.Errors++ })
		return nil, dataLoss("GetFilter(%s, %s): checksum %s does not match version %q", surface, userID, view.Version(), resp.GetVersion())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.FullPulls++
	if e, ok := c.byKey[key]; ok {
		c.removeLocked(e)
	}
	size := view.SizeBytes()
	if size <= c.maxBytes {
		c.byKey[key] = c.lru.PushFront(&cacheEntry{key, view, size})
		c.bytes += size
		for c.bytes > c.maxBytes {
			c.removeLocked(c.lru.Back())
			c.stats.Evictions++
		}
	}
	return view, nil
}

func (c *FilterCache) removeLocked(e *list.Element) {
	ent := e.Value.(*cacheEntry)
	c.lru.Remove(e)
	delete(c.byKey, ent.key)
	c.bytes -= ent.size
}

func (c *FilterCache) count(f func(*CacheStats)) {
	c.mu.Lock()
	f(&c.stats)
	c.mu.Unlock()
}

// Stats returns the counters and the users and bytes held.
func (c *FilterCache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Users = len(c.byKey)
	s.Bytes = c.bytes
	return s
}

// cacheError is DATA_LOSS wrapping the decoder's error
// (errors.Is(err, filterview.ErrMalformed)).
type cacheError struct {
	st  *status.Status
	err error
}

func (e *cacheError) Error() string              { return "DATA_LOSS: " + e.st.Message() }
func (e *cacheError) GRPCStatus() *status.Status { return e.st }
func (e *cacheError) Unwrap() error              { return e.err }

// Both clients can feed a FilterCache.
var _ FilterGetter = (*RoutingClient)(nil)
var _ FilterGetter = plainGetter{}
