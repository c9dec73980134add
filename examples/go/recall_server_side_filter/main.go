// Mode A: send the user's candidates to FilterRecalled, keep what comes back.
//
//	build/examples/go/recall_server_side_filter TARGET SURFACE USER_ID ID...
//
// prints the candidates the user has not seen, in order.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"

	"exposurefilter/efclient"
	pb "exposurefilter/v1"
)

// dropExposed is what a recall server calls before ranking.
func dropExposed(ctx context.Context, c *efclient.Client, surface, userID string, candidates []uint64) ([]uint64, error) {
	resp, err := c.FilterRecalled(ctx, &pb.FilterRecalledRequest{
		Surface: surface, UserId: userID, CandidateIds: candidates})
	if err != nil {
		return nil, err
	}
	return resp.GetKeptIds(), nil
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
	kept, err := dropExposed(context.Background(), efclient.NewClient(conn), surface, userID, candidates)
	if err != nil {
		log.Fatal(err) // the server's code and message
	}
	var b strings.Builder
	for _, id := range kept {
		fmt.Fprintf(&b, " %d", id)
	}
	fmt.Println("kept:" + b.String())
}
