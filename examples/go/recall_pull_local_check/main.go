// Mode B: pull the user's filter (GetFilter) and check candidates locally
// with the Go decoder; FilterCache revalidates with if_version, so an
// unchanged filter is not sent again. Checks twice to show the
// revalidation.
//
//	build/examples/go/recall_pull_local_check TARGET SURFACE USER_ID ID...
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"

	"exposurefilter/efclient"
)

// dropExposed is what a recall server calls before ranking.
func dropExposed(ctx context.Context, cache *efclient.FilterCache, surface, userID string, candidates []uint64) ([]uint64, error) {
	view, err := cache.Get(ctx, surface, userID)
	if err != nil {
		return nil, err
	}
	var kept []uint64
	for i, keep := range view.KeepMaskIDs(candidates) {
		if keep {
			kept = append(kept, candidates[i])
		}
	}
	return kept, nil
}

func main() {
	if len(os.Args) < 4 {
		log.Fatalf("usage: %s TARGET SURFACE USER_ID ID...", os.Args[0])
	}
	target, surface, userID := os.Args[1], os.Args[2], os.Args[3]
	var candidates []uint64
	for _, a := range os.Args[4:] {
		id, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			log.Fatalf("candidate %q: %v", a, err)
		}
		candidates = append(candidates, id)
	}
	conn, err := efclient.Dial(target, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	cache := efclient.NewFilterCache(efclient.NewClient(conn).Getter(), 64<<20)
	for i := 0; i < 2; i++ {
		kept, err := dropExposed(context.Background(), cache, surface, userID, candidates)
		if err != nil {
			log.Fatal(err)
		}
		var b strings.Builder
		for _, id := range kept {
			fmt.Fprintf(&b, " %d", id)
		}
		fmt.Println("kept:" + b.String())
	}
	s := cache.Stats()
	fmt.Printf("full_pulls=%d not_modified=%d\n", s.FullPulls, s.NotModified)
}
