// Package partitioning computes which replicas own a user
// (docs/scale-out.md), exactly as include/exposure_filter/partitioning.h
// and clients/python/exposure_filter/partitioning.py do:
//
//	partition = (murmur2(user id bytes) & 0x7fffffff) % P   // Kafka's default
//	owner i   = (partition + i) % N, i = 0 .. R-1            // owner 0 preferred
//
// murmur2 is Kafka's (org.apache.kafka.common.utils.Utils.murmur2):
// MurmurHash2, seed 0x9747b28c, little-endian 4-byte words; the sign bit
// is masked, not negated (Utils.toPositive).
package partitioning

import (
	"encoding/binary"
	"fmt"
)

const (
	seed = 0x9747b28c
	m    = 0x5bd1e995
)

// Murmur2 is Kafka's murmur2 of key, as a signed 32-bit int like Java's.
func Murmur2(key []byte) int32 {
	n := len(key)
	h := uint32(seed) ^ uint32(n)
	words := n / 4
	for i := 0; i < words; i++ {
		k := binary.LittleEndian.Uint32(key[4*i:])
		k *= m
		k ^= k >> 24
		k *= m
		h *= m
		h ^= k
	}
	tail := key[4*words:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// PartitionForKey is Kafka's default partition of a record keyed by key
// (partitions >= 1).
func PartitionForKey(key []byte, partitions int) int {
	return int(uint32(Murmur2(key))&0x7fffffff) % partitions
}

// CheckLayout reports a P, N, R that no cluster can run:
// 1 <= replicas <= partitions, 1 <= replicationFactor <= replicas.
func CheckLayout(partitions, replicas, replicationFactor int) error {
	if replicas < 1 || replicas > partitions {
		return fmt.Errorf("need 1 <= replicas (%d) <= partitions (%d)", replicas, partitions)
	}
	if replicationFactor < 1 || replicationFactor > replicas {
		return fmt.Errorf("need 1 <= replication_factor (%d) <= replicas (%d)", replicationFactor, replicas)
	}
	return nil
}

// ReplicaForUser is the ordinal of the user's owner 0.
func ReplicaForUser(userID string, partitions, replicas int) int {
	return PartitionForKey([]byte(userID), partitions) % replicas
}

// OwnersOfPartition lists the ordinals owning partition, owner 0 first:
// owner i = (partition + i) % replicas.
func OwnersOfPartition(partition, replicas, replicationFactor int) []int {
	owners := make([]int, replicationFactor)
	for i := range owners {
		owners[i] = (partition + i) % replicas
	}
	return owners
}

// OwnersOfUser lists the ordinals owning userID, owner 0 first.
func OwnersOfUser(userID string, partitions, replicas, replicationFactor int) []int {
	return OwnersOfPartition(PartitionForKey([]byte(userID), partitions), replicas, replicationFactor)
}

// PartitionsOfReplica lists, ascending, the partitions replica ordinal is
// one of the owners of: p with (ordinal - p) mod replicas < R.
func PartitionsOfReplica(ordinal, partitions, replicas, replicationFactor int) []int {
	var out []int
	for p := 0; p < partitions; p++ {
		d := ((ordinal-p)%replicas + replicas) % replicas
		if d < replicationFactor {
			out = append(out, p)
		}
	}
	return out
}

// StatefulSetReplicaAddresses are the per-pod DNS names behind the headless
// Service, in ordinal order: "<statefulset>-<i>.<service>[.<namespace>]:<port>".
func StatefulSetReplicaAddresses(statefulset, service string, port, replicas int, namespace string) []string {
	suffix := ""
	if namespace != "" {
		suffix = "." + namespace
	}
	out := make([]string, replicas)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d.%s%s:%d", statefulset, i, service, suffix, port)
	}
	return out
}
