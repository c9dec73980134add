"""Writes xxh3_vectors.tsv beside this file: XXH3-64 of deterministic
inputs by python3-xxhash (the reference C library), for the Java Xxh3
test. Every length 0..300 (each length class, both sides of 240), some long
inputs (several 1,024-byte blocks and partial stripes), three seeds.
    /usr/bin/python3 make_xxh3_vectors.py
"""

import os

import xxhash

SEEDS = (0, 0x657275736F707865, 0xFFFFFFFFFFFFFFFF)
LENGTHS = list(range(0, 301)) + [511, 512, 1023, 1024, 1025, 2048, 2049,
                                 4096 + 64, 10000]


def data(n):
    # A fixed pseudo-random byte string (an LCG), so the file is stable.
    out = bytearray()
    x = n * 2654435761 + 1
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(x >> 56)
    return bytes(out)


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "xxh3_vectors.tsv")
    with open(path, "w", encoding="ascii") as f:
        f.write("# length\tseed (hex)\txxh3_64 (hex); input: data(length) "
                "of make_xxh3_vectors.py\n")
        for n in LENGTHS:
            d = data(n)
            for seed in SEEDS:
                f.write("%d\t%016x\t%016x\n"
                        % (n, seed, xxhash.xxh3_64_intdigest(d, seed=seed)))


if __name__ == "__main__":
    main()
