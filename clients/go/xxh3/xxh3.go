// Package xxh3 is XXH3-64 (XXH3_64bits_withSeed of the reference xxHash
// library, version 0.8), written from xxHash's specification: the hash the
// portable filter format uses for items and for its checksum
// (docs/filter-format.md). Portable Go, no assembly; checked against
// Debian's python3-xxhash by xxh3_test.go.
package xxh3

import (
	"encoding/binary"
	"math/bits"
)

const (
	prime32_1 = 0x9E3779B1
	prime32_2 = 0x85EBCA77
	prime32_3 = 0xC2B2AE3D
	prime64_1 = 0x9E3779B185EBCA87
	prime64_2 = 0xC2B2AE3D27D4EB4F
	prime64_3 = 0x165667B19E3779F9
	prime64_4 = 0x85EBCA77C2B2AE63
	prime64_5 = 0x27D4EB2F165667C5
	primeMx1  = 0x165667919E3779F9
	primeMx2  = 0x9FB21C651E98DF25

	secretSize        = 192
	stripeLen         = 64
	secretConsumeRate = 8
	accNB             = 8
	midSizeMax        = 240
	midSizeStart      = 3
	midSizeLast       = 17
	secretSizeMin     = 136
	secretLastAcc     = 7
	secretMergeAccs   = 11
)

// kSecret is XXH3's default secret (XXH3_kSecret).
var kSecret = [secretSize]byte{
	0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
	0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
	0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
	0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
	0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
	0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
	0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
	0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
	0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
	0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
	0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
	0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
}

func r64(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }
func r32(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[i:]) }

func mulFold64(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func xxh64Avalanche(h uint64) uint64 {
	h ^= h >> 33
	h *= prime64_2
	h ^= h >> 29
	h *= prime64_3
	h ^= h >> 32
	return h
}

func avalanche(h uint64) uint64 {
	h ^= h >> 37
	h *= primeMx1
	h ^= h >> 32
	return h
}

func rrmxmx(h uint64, n uint64) uint64 {
	h ^= bits.RotateLeft64(h, 49) ^ bits.RotateLeft64(h, 24)
	h *= primeMx2
	h ^= (h >> 35) + n
	h *= primeMx2
	h ^= h >> 28
	return h
}

func mix16(in []byte, i int, sec []byte, j int, seed uint64) uint64 {
	lo := r64(in, i)
	hi := r64(in, i+8)
	return mulFold64(lo^(r64(sec, j)+seed), hi^(r64(sec, j+8)-seed))
}

// Hash is XXH3-64 with seed 0 (XXH3_64bits).
func Hash(b []byte) uint64 { return HashSeed(b, 0) }

// HashSeed is XXH3-64 with a seed (XXH3_64bits_withSeed).
func HashSeed(in []byte, seed uint64) uint64 {
	n := len(in)
	sec := kSecret[:]
	switch {
	case n == 0:
		return xxh64Avalanche(seed ^ (r64(sec, 56) ^ r64(sec, 64)))
	case n <= 3:
		c1, c2, c3 := uint32(in[0]), uint32(in[n>>1]), uint32(in[n-1])
		combined := c1<<16 | c2<<24 | c3 | uint32(n)<<8
		bitflip := uint64(r32(sec, 0)^r32(sec, 4)) + seed
		return xxh64Avalanche(uint64(combined) ^ bitflip)
	case n <= 8:
		seed ^= uint64(bits.ReverseBytes32(uint32(seed))) << 32
		in1 := r32(in, 0)
		in2 := r32(in, n-4)
		bitflip := (r64(sec, 8) ^ r64(sec, 16)) - seed
		in64 := uint64(in2) + uint64(in1)<<32
		return rrmxmx(in64^bitflip, uint64(n))
	case n <= 16:
		bitflip1 := (r64(sec, 24) ^ r64(sec, 32)) + seed
		bitflip2 := (r64(sec, 40) ^ r64(sec, 48)) - seed
		lo := r64(in, 0) ^ bitflip1
		hi := r64(in, n-8) ^ bitflip2
		acc := uint64(n) + bits.ReverseBytes64(lo) + hi + mulFold64(lo, hi)
		return avalanche(acc)
	case n <= 128:
		acc := uint64(n) * prime64_1
		if n > 32 {
			if n > 64 {
				if n > 96 {
					acc += mix16(in, 48, sec, 96, seed)
					acc += mix16(in, n-64, sec, 112, seed)
				}
				acc += mix16(in, 32, sec, 64, seed)
				acc += mix16(in, n-48, sec, 80, seed)
			}
			acc += mix16(in, 16, sec, 32, seed)
			acc += mix16(in, n-32, sec, 48, seed)
		}
		acc += mix16(in, 0, sec, 0, seed)
		acc += mix16(in, n-16, sec, 16, seed)
		return avalanche(acc)
	case n <= midSizeMax:
		acc := uint64(n) * prime64_1
		rounds := n / 16
		for i := 0; i < 8; i++ {
			acc += mix16(in, 16*i, sec, 16*i, seed)
		}
		acc = avalanche(acc)
		for i := 8; i < rounds; i++ {
			acc += mix16(in, 16*i, sec, 16*(i-8)+midSizeStart, seed)
		}
		acc += mix16(in, n-16, sec, secretSizeMin-midSizeLast, seed)
		return avalanche(acc)
	}
	if seed != 0 {
		var custom [secretSize]byte
		for i := 0; i < secretSize/16; i++ {
			binary.LittleEndian.PutUint64(custom[16*i:], r64(sec, 16*i)+seed)
			binary.LittleEndian.PutUint64(custom[16*i+8:], r64(sec, 16*i+8)-seed)
		}
		return hashLong(in, custom[:])
	}
	return hashLong(in, sec)
}

func accumulate512(acc *[accNB]uint64, in []byte, i int, sec []byte, j int) {
	for l := 0; l < accNB; l++ {
		v := r64(in, i+8*l)
		k := v ^ r64(sec, j+8*l)
		acc[l^1] += v
		acc[l] += uint64(uint32(k)) * (k >> 32)
	}
}

func scramble(acc *[accNB]uint64, sec []byte, j int) {
	for l := 0; l < accNB; l++ {
		a := acc[l]
		a ^= a >> 47
		a ^= r64(sec, j+8*l)
		a *= prime32_1
		acc[l] = a
	}
}

func hashLong(in []byte, sec []byte) uint64 {
	acc := [accNB]uint64{prime32_3, prime64_1, prime64_2, prime64_3,
		prime64_4, prime32_2, prime64_5, prime32_1}
	n := len(in)
	stripesPerBlock := (len(sec) - stripeLen) / secretConsumeRate
	blockLen := stripeLen * stripesPerBlock
	blocks := (n - 1) / blockLen
	for b := 0; b < blocks; b++ {
		for s := 0; s < stripesPerBlock; s++ {
			accumulate512(&acc, in, b*blockLen+s*stripeLen, sec, s*secretConsumeRate)
		}
		scramble(&acc, sec, len(sec)-stripeLen)
	}
	stripes := ((n - 1) - blockLen*blocks) / stripeLen
	for s := 0; s < stripes; s++ {
		accumulate512(&acc, in, blocks*blockLen+s*stripeLen, sec, s*secretConsumeRate)
	}
	accumulate512(&acc, in, n-stripeLen, sec, len(sec)-stripeLen-secretLastAcc)
	result := uint64(n) * prime64_1
	for i := 0; i < 4; i++ {
		result += mulFold64(acc[2*i]^r64(sec, secretMergeAccs+16*i),
			acc[2*i+1]^r64(sec, secretMergeAccs+16*i+8))
	}
	return avalanche(result)
}
