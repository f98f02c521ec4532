#!/usr/bin/env python3
"""gen_hadtables.py - the embedded Hadamard tables of quarot.h (its // >>hadtables section).

Reads hadN.txt files (N rows of N characters, '+' = +1, '-' = -1), checks each one, and prints the C
text of the >>hadtables implementation section on stdout (paste it over the old section).

Compact form: split H into a 4x4 array of blocks of size m = N/4. In the block-structured files
every block is either circulant (row r is the first row shifted right by r: B[r][j] = b[(j - r) mod m])
or back-circulant (row r is the first row shifted left by r: B[r][j] = b[(j + r) mod m]). The order is
then fully given by the 16 first rows (16*m = 4N bits, N/2 bytes) and a 16-bit mask that says which
blocks are back-circulant (bit 4*bi + bj). The script checks, for every file it embeds:
  1. H is +-1 and H*H^T = N*I exactly;
  2. each block really is circulant or back-circulant (the layout is read from the file, not assumed);
  3. rebuilding H from the packed bits and the mask, the way quarot.h does, gives the file back.
Files without this structure are reported on stderr and skipped.

Bit order: blocks in row-major order (bi, bj), then the m signs of the block's first row; bit = 1 for
'-'; packed four bits per hex digit, most significant bit first.

Usage: python3 tools/gen_hadtables.py [DIR] [ORDER ...]
  DIR defaults to ../shared/hadamard (relative to the repository root); ORDER defaults to the orders
  quarot.h embeds. stdlib only.
"""
import os
import sys

DEFAULT_ORDERS = [92, 116, 156, 172, 188, 236, 260, 268, 292, 356, 404, 412, 428, 452, 476, 508,
                  604, 652, 764, 876, 956, 1004]
LINE = 100  # hex characters per string-literal line (lines stay under ~120 characters)


def read_matrix(path):
    with open(path) as f:
        rows = [ln.strip() for ln in f if ln.strip()]
    n = len(rows)
    h = []
    for r in rows:
        if len(r) != n or set(r) - set("+-"):
            raise ValueError("%s: not an N x N matrix of '+'/'-'" % path)
        h.append([1 if c == "+" else -1 for c in r])
    return h


def check_hadamard(h):
    """H*H^T == N*I exactly, rows as integers so the check is a popcount of XORs."""
    n = len(h)
    bits = [int("".join("1" if v < 0 else "0" for v in row), 2) for row in h]
    for i in range(n):
        for j in range(i + 1, n):
            if bin(bits[i] ^ bits[j]).count("1") * 2 != n:
                return False
    return True


def block_kind(h, m, bi, bj):
    """0 circulant, 1 back-circulant, None neither (circulant wins when both hold)."""
    first = h[bi * m][bj * m:(bj + 1) * m]
    circ = all(h[bi * m + r][bj * m + j] == first[(j - r) % m] for r in range(m) for j in range(m))
    if circ:
        return 0
    back = all(h[bi * m + r][bj * m + j] == first[(j + r) % m] for r in range(m) for j in range(m))
    return 1 if back else None


def encode(h):
    """(mask, hex string) or None when some block is neither circulant nor back-circulant."""
    n = len(h)
    if n % 4:
        return None
    m = n // 4
    mask = 0
    bits = []
    for bi in range(4):
        for bj in range(4):
            k = block_kind(h, m, bi, bj)
            if k is None:
                return None
            mask |= k << (4 * bi + bj)
            bits.extend(1 if v < 0 else 0 for v in h[bi * m][bj * m:(bj + 1) * m])
    assert len(bits) % 4 == 0
    hexs = "".join("%x" % (bits[i] * 8 + bits[i + 1] * 4 + bits[i + 2] * 2 + bits[i + 3])
                   for i in range(0, len(bits), 4))
    return mask, hexs


def decode(n, mask, hexs):
    """The rebuild quarot.h does (quarot__had_table), written independently of encode()."""
    m = n // 4
    def bit(t):
        return (int(hexs[t >> 2], 16) >> (3 - (t & 3))) & 1
    h = [[0] * n for _ in range(n)]
    for bi in range(4):
        for bj in range(4):
            blk = 4 * bi + bj
            back = (mask >> blk) & 1
            for r in range(m):
                for j in range(m):
                    c = (j + r) % m if back else (j - r) % m
                    h[bi * m + r][bj * m + j] = -1 if bit(blk * m + c) else 1
    return h


def layout_name(mask):
    if mask == 0:
        return "all circulant (Williamson)"
    gs = sum(1 << (4 * bi + bj) for bi in range(4) for bj in range(4) if bi != bj)
    if mask == gs:
        return "diagonal circulant, off-diagonal back-circulant (Goethals-Seidel)"
    return "mixed, mask 0x%04x" % mask


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    folder = os.path.join(here, "..", "..", "shared", "hadamard")
    args = argv[1:]
    if args and not args[0].isdigit():
        folder = args.pop(0)
    orders = [int(a) for a in args] or DEFAULT_ORDERS
    entries = []
    for n in orders:
        path = os.path.join(folder, "had%d.txt" % n)
        h = read_matrix(path)
        if len(h) != n:
            sys.exit("%s: %d rows, expected %d" % (path, len(h), n))
        if not check_hadamard(h):
            sys.exit("%s: H*H^T != N*I" % path)
        enc = encode(h)
        if enc is None:
            print("skip %d: no circulant / back-circulant block structure" % n, file=sys.stderr)
            continue
        mask, hexs = enc
        if decode(n, mask, hexs) != h:
            sys.exit("%d: rebuild differs from the file" % n)
        print("%4d: %s, %d bytes" % (n, layout_name(mask), len(hexs) // 2), file=sys.stderr)
        entries.append((n, mask, hexs))

    total = sum(len(hx) // 2 for _, _, hx in entries)
    out = []
    out.append("// >>hadtables")
    out.append("// Hadamard matrices no construction here reaches, as 4x4 arrays of circulant / back-circulant")
    out.append("// blocks of size m = N/4 (Williamson and Goethals-Seidel arrays):")
    out.append("//     H[bi*m + r][bj*m + j] = s(bi, bj, (j - r) mod m)   block circulant,")
    out.append("//                             s(bi, bj, (j + r) mod m)   block back-circulant (bit 4*bi+bj of mask),")
    out.append("// s(bi, bj, c) = bit (4*bi + bj)*m + c of the hex string (4 bits a digit, MSB first), 1 = -1.")
    out.append("// Generated by tools/gen_hadtables.py, which checks H*H^T = N*I and that this rebuild gives the")
    out.append("// source file back. %d orders, %d bytes of signs." % (len(entries), total))
    out.append("typedef struct quarot__hadtable {")
    out.append("    int32_t n;            // order, a multiple of 4")
    out.append("    uint32_t back_mask;   // bit 4*bi+bj set: block (bi, bj) is back-circulant")
    out.append("    const char* hex;      // 16 first rows, N hex digits")
    out.append("} quarot__hadtable;")
    out.append("")
    out.append("static const quarot__hadtable quarot__hadtables[] = {")
    for n, mask, hexs in entries:
        out.append("    {%d, 0x%04x," % (n, mask))
        chunks = [hexs[i:i + LINE] for i in range(0, len(hexs), LINE)]
        for i, c in enumerate(chunks):
            out.append('     "%s"%s' % (c, "}," if i == len(chunks) - 1 else ""))
    out.append("};")
    out.append("")
    out.append("// 1 and the table's mask and hex string when order n is embedded, else 0.")
    out.append("static int quarot__hadtable_get(int64_t n, uint32_t* back_mask, const char** hex) {")
    out.append("    size_t i;")
    out.append("    for (i = 0; i < sizeof quarot__hadtables / sizeof quarot__hadtables[0]; ++i) {")
    out.append("        if ((int64_t)quarot__hadtables[i].n != n) continue;")
    out.append("        if (back_mask) *back_mask = quarot__hadtables[i].back_mask;")
    out.append("        if (hex) *hex = quarot__hadtables[i].hex;")
    out.append("        return 1;")
    out.append("    }")
    out.append("    return 0;")
    out.append("}")
    print("\n".join(out))
    print("total %d orders, %d bytes of signs" % (len(entries), total), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
