// The allowlist and the table name, as the Go code computes them
// (policy.Decode, policy.Allowlist.Canonical, policy.ChainName), for a
// front that installs rules itself (see nft.h). Everything here is static.
#ifndef SFORGE_CFRONT_ALLOW_H
#define SFORGE_CFRONT_ALLOW_H
#include <stddef.h>
#include <stdint.h>

// policy.MaxEntries and policy.MaxValueBytes.
#define CFRONT_MAX_ENTRIES 256
#define CFRONT_MAX_VALUE (16 << 10)

// One allowed destination, as policy.Endpoint after NewEndpoint.
struct cfront_endpoint {
	uint8_t addr[4]; // network byte order, host bits clear
	uint8_t bits;    // prefix length, 0..32
	uint8_t proto;   // IPPROTO_TCP (6) or IPPROTO_UDP (17)
	uint16_t port;   // host byte order, 1..65535
};

// A canonical allowlist: policy.Allowlist.Canonical's result. Endpoints in
// compareEndpoints' order (protocol name "tcp" < "udp", then address, then
// prefix length, then port), resolvers in address order, no duplicates.
struct cfront_allowlist {
	size_t n_endpoints, n_dns;
	struct cfront_endpoint endpoints[CFRONT_MAX_ENTRIES];
	uint8_t dns[CFRONT_MAX_ENTRIES][4];
	int drop; // "else:drop"; 0 is the default, reject
};

// Implemented below this line (see the functions' comments; internal/
// cfront/cfronttest compares each with the Go it mirrors, by table and by
// differential fuzzing). The functions are static inline, as in cfront.h,
// so that a front that uses only some of them compiles without warnings.
// No heap allocation, no recursion, no libc call; the caller provides the
// struct cfront_allowlist (about 3 KiB) and the name's buffer.
//   static inline int cfront_allow_decode(const char *v, size_t n, struct cfront_allowlist *a);
//     policy.Decode then Canonical: 1 exactly when Go accepts, with the
//     same allowlist; 0 whenever Go errors. No valid value is left to Go.
//   static inline size_t cfront_chain_name(const char *id, size_t n, char *out, size_t cap);
//     policy.ChainName.
//   static inline void cfront_sha256(const void *p, size_t n, uint8_t sum[32]);
//     crypto/sha256.Sum256, for cfront_chain_name.
// And their helpers: cfront_ipv4, cfront_prefix_bits, cfront_port,
// cfront_endpoint_cmp, cfront_is.

// cfront_is reports whether the n bytes at s are the string lit.
static inline int cfront_is(const char *s, size_t n, const char *lit) {
	size_t i = 0;
	for (; i < n && lit[i]; i++)
		if (s[i] != lit[i])
			return 0;
	return i == n && !lit[i];
}

// cfront_ipv4 mirrors netip.ParseAddr followed by Addr.Is4 on the n bytes
// at s: 1, with the address in addr, exactly when ParseAddr succeeds and
// returns an IPv4 address. ParseAddr takes the IPv4 path (parseIPv4) only
// when a '.' comes before any ':' or '%', and parseIPv4 refuses every byte
// but digits and dots; the IPv6 path (a ':' first) only returns IPv6
// addresses, "::ffff:1.2.3.4" included (Is4 is false for it; Decode never
// unmaps before checking Is4), and a '%' first is an error. So the IPv4
// addresses are exactly parseIPv4Fields' strings: four fields separated by
// dots, each one to three digits, no leading zero ("0" itself is fine),
// at most 255. No zone: "1.2.3.4%eth0" is an error in parseIPv4.
static inline int cfront_ipv4(const char *s, size_t n, uint8_t addr[4]) {
	unsigned val = 0, digits = 0, pos = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c >= '0' && c <= '9') {
			if (digits == 1 && val == 0) // "01": a leading zero
				return 0;
			val = val * 10 + (unsigned)(c - '0');
			digits++;
			if (val > 255)
				return 0;
		} else if (c == '.') {
			if (i == 0 || i == n - 1 || s[i - 1] == '.' || pos == 3)
				return 0;
			addr[pos++] = (uint8_t)val;
			val = digits = 0;
		} else {
			return 0;
		}
	}
	if (pos < 3) // also the empty string, which ParseAddr refuses too
		return 0;
	addr[3] = (uint8_t)val;
	return 1;
}

// cfront_prefix_bits mirrors ParsePrefix's reading of the n bytes after
// the last '/' for an IPv4 address: one digit, or a digit from 1 to 9
// followed by digits (no sign, no leading zero, which ParsePrefix refuses
// before strconv.Atoi; Atoi in base 10 takes no '_'), at most 32.
static inline int cfront_prefix_bits(const char *s, size_t n, uint8_t *bits) {
	if (n == 0 || (n > 1 && (s[0] < '1' || s[0] > '9')))
		return 0;
	unsigned v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		v = v * 10 + (unsigned)(s[i] - '0');
		if (v > 32) // also what would overflow Atoi: still an error
			return 0;
	}
	*bits = (uint8_t)v;
	return 1;
}

// cfront_port mirrors parseEndpointEntry's port check: strconv.ParseUint
// in base 10 and 16 bits (digits only: no sign, no '_', no space, at most
// 65535), not 0, and written as FormatUint writes it (no leading zero).
static inline int cfront_port(const char *s, size_t n, uint16_t *port) {
	if (n == 0 || s[0] < '1' || s[0] > '9')
		return 0;
	uint32_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		v = v * 10 + (uint32_t)(s[i] - '0');
		if (v > 65535)
			return 0;
	}
	*port = (uint16_t)v;
	return 1;
}

static inline uint32_t cfront_be32(const uint8_t b[4]) {
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

// cfront_endpoint_cmp mirrors compareEndpoints: the protocol's name ("tcp"
// before "udp", as 6 before 17), then Addr.Compare (for two IPv4
// addresses, their numeric order), then the prefix length, then the port.
static inline int cfront_endpoint_cmp(const struct cfront_endpoint *x, const struct cfront_endpoint *y) {
	uint32_t ax = cfront_be32(x->addr), ay = cfront_be32(y->addr);
	if (x->proto != y->proto)
		return x->proto < y->proto ? -1 : 1;
	if (ax != ay)
		return ax < ay ? -1 : 1;
	if (x->bits != y->bits)
		return x->bits < y->bits ? -1 : 1;
	if (x->port != y->port)
		return x->port < y->port ? -1 : 1;
	return 0;
}

// cfront_allow_decode mirrors policy.Decode, whose result is Canonical's:
// it returns 1 and fills *a exactly when Decode returns a nil error, with
// the same allowlist in the same (canonical) order, and 0 whenever Decode
// returns an error (*a then holds no endpoint, no resolver, and reject).
// The value is n bytes, any bytes: a NUL is just a byte no entry accepts.
//
// Decode's errors all end it, so their order does not matter here, and
// neither does which one it reports. What it checks:
//   - at most MaxValueBytes bytes, not empty, "v1" before the first ';'
//     (strings.Split on ";"), at most MaxEntries entries after it. (No
//     entry Decode accepts is longer than 28 bytes, so the byte limit only
//     refuses what the entry limit or the entries would: kept all the same,
//     as Go has it, and so that no loop here runs over more than 16 KiB);
//   - each entry KIND:REST, cut at its first ':' (an empty entry, or one
//     without ':', is an error), KIND exactly tcp, udp, dns or else;
//   - tcp/udp: REST is DST:PORT cut at its first ':', so that DST holds no
//     ':' and ParseAddr/ParsePrefix can only take their IPv4 path (see
//     cfront_ipv4). A DST with a '/' is ParsePrefix's: the address before
//     the last '/', the bits after it (cfront_prefix_bits). NewEndpoint
//     then refuses host bits (no Unmap or "-96" can apply: the address is
//     IPv4, never 4-in-6); the protocol is valid and the port not 0;
//   - dns: ParseAddr(REST) and Is4 (cfront_ipv4);
//   - else: ParseAction ("reject" or "drop"), and only once (a second else
//     is an error whatever its action: "the action is already set");
//   - no duplicate, keyed by Endpoint.String(), "dns:"+Addr.String() and
//     "else". Endpoint.String() after NewEndpoint is one string per
//     (protocol, address, prefix length, port): "a.b.c.d" for /32,
//     "a.b.c.d/N" otherwise, so "tcp:1.2.3.4:80" and "tcp:1.2.3.4/32:80"
//     are duplicates, as here where both are the same struct. Duplicates
//     are found after sorting, as equal neighbours;
//   - Canonical: the action defaults to reject, endpoints and resolvers
//     sorted (compareEndpoints, Addr.Compare), Compact (nothing to remove:
//     a duplicate was an error), and at most MaxEntries of them (implied by
//     the entry limit, checked as Canonical does).
static inline int cfront_allow_decode(const char *v, size_t n, struct cfront_allowlist *a) {
	a->n_endpoints = a->n_dns = 0;
	a->drop = 0;
	if (n > CFRONT_MAX_VALUE || n == 0)
		goto fail;
	size_t entries = 0;
	for (size_t i = 0; i < n; i++)
		entries += v[i] == ';';
	if (entries > CFRONT_MAX_ENTRIES)
		goto fail;
	size_t end = 0; // of the version
	while (end < n && v[end] != ';')
		end++;
	if (!cfront_is(v, end, "v1"))
		goto fail;
	int action_set = 0;
	for (size_t i = end; i < n;) { // v[i] is ';'
		const char *e = v + i + 1;
		size_t len = 0;
		while (i + 1 + len < n && e[len] != ';')
			len++;
		i += 1 + len;
		size_t k = 0; // the kind's length
		while (k < len && e[k] != ':')
			k++;
		if (k == len) // an empty entry, or no ':'
			goto fail;
		const char *rest = e + k + 1;
		size_t rn = len - k - 1;
		if (cfront_is(e, k, "tcp") || cfront_is(e, k, "udp")) {
			size_t d = 0; // DST's length
			while (d < rn && rest[d] != ':')
				d++;
			if (d == rn)
				goto fail;
			struct cfront_endpoint ep;
			ep.proto = e[0] == 't' ? 6 : 17;
			size_t slash = d; // the last '/' in DST, d when none
			for (size_t j = 0; j < d; j++)
				if (rest[j] == '/')
					slash = j;
			if (slash < d) {
				if (!cfront_ipv4(rest, slash, ep.addr) || !cfront_prefix_bits(rest + slash + 1, d - slash - 1, &ep.bits))
					goto fail;
			} else {
				if (!cfront_ipv4(rest, d, ep.addr))
					goto fail;
				ep.bits = 32;
			}
			if (!cfront_port(rest + d + 1, rn - d - 1, &ep.port))
				goto fail;
			uint32_t mask = ep.bits ? UINT32_MAX << (32 - ep.bits) : 0;
			if (cfront_be32(ep.addr) & ~mask) // Masked() != p: host bits
				goto fail;
			if (a->n_endpoints >= CFRONT_MAX_ENTRIES) // unreachable: the entry limit
				goto fail;
			a->endpoints[a->n_endpoints++] = ep;
		} else if (cfront_is(e, k, "dns")) {
			if (a->n_dns >= CFRONT_MAX_ENTRIES || !cfront_ipv4(rest, rn, a->dns[a->n_dns]))
				goto fail;
			a->n_dns++;
		} else if (cfront_is(e, k, "else")) {
			int drop = cfront_is(rest, rn, "drop");
			if ((!drop && !cfront_is(rest, rn, "reject")) || action_set)
				goto fail;
			action_set = 1;
			a->drop = drop;
		} else {
			goto fail;
		}
	}
	// Canonical's sorts (insertion sorts: at most 256 elements each), and
	// the duplicates as equal neighbours.
	for (size_t i = 1; i < a->n_endpoints; i++) {
		struct cfront_endpoint x = a->endpoints[i];
		size_t j = i;
		for (; j > 0 && cfront_endpoint_cmp(&a->endpoints[j - 1], &x) > 0; j--)
			a->endpoints[j] = a->endpoints[j - 1];
		a->endpoints[j] = x;
	}
	for (size_t i = 1; i < a->n_endpoints; i++)
		if (cfront_endpoint_cmp(&a->endpoints[i - 1], &a->endpoints[i]) == 0)
			goto fail;
	for (size_t i = 1; i < a->n_dns; i++) {
		uint8_t x[4] = {a->dns[i][0], a->dns[i][1], a->dns[i][2], a->dns[i][3]};
		size_t j = i;
		for (; j > 0 && cfront_be32(a->dns[j - 1]) > cfront_be32(x); j--)
			for (int b = 0; b < 4; b++)
				a->dns[j][b] = a->dns[j - 1][b];
		for (int b = 0; b < 4; b++)
			a->dns[j][b] = x[b];
	}
	for (size_t i = 1; i < a->n_dns; i++)
		if (cfront_be32(a->dns[i - 1]) == cfront_be32(a->dns[i]))
			goto fail;
	if (a->n_endpoints + a->n_dns > CFRONT_MAX_ENTRIES)
		goto fail;
	return 1;
fail:
	a->n_endpoints = a->n_dns = 0;
	a->drop = 0;
	return 0;
}

// A compact SHA-256 (FIPS 180-4), crypto/sha256.Sum256's result, for
// cfront_chain_name. The tests compare it with crypto/sha256.
static const uint32_t cfront_sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t cfront_ror(uint32_t x, int r) { return x >> r | x << (32 - r); }

static inline void cfront_sha256_block(uint32_t h[8], const uint8_t *p) {
	uint32_t w[64], s[8];
	for (int i = 0; i < 16; i++)
		w[i] = cfront_be32(p + 4 * i);
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = cfront_ror(w[i - 15], 7) ^ cfront_ror(w[i - 15], 18) ^ w[i - 15] >> 3;
		uint32_t s1 = cfront_ror(w[i - 2], 17) ^ cfront_ror(w[i - 2], 19) ^ w[i - 2] >> 10;
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	for (int i = 0; i < 8; i++)
		s[i] = h[i];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = s[7] + (cfront_ror(s[4], 6) ^ cfront_ror(s[4], 11) ^ cfront_ror(s[4], 25)) +
			      ((s[4] & s[5]) ^ (~s[4] & s[6])) + cfront_sha256_k[i] + w[i];
		uint32_t t2 = (cfront_ror(s[0], 2) ^ cfront_ror(s[0], 13) ^ cfront_ror(s[0], 22)) +
			      ((s[0] & s[1]) ^ (s[0] & s[2]) ^ (s[1] & s[2]));
		for (int j = 7; j > 0; j--)
			s[j] = s[j - 1];
		s[4] += t1;
		s[0] = t1 + t2;
	}
	for (int i = 0; i < 8; i++)
		h[i] += s[i];
}

// cfront_sha256 writes the SHA-256 of the n bytes at p into sum.
static inline void cfront_sha256(const void *p, size_t n, uint8_t sum[32]) {
	uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
	const uint8_t *b = p;
	size_t left = n;
	for (; left >= 64; b += 64, left -= 64)
		cfront_sha256_block(h, b);
	// The padding: the last bytes, 0x80, zeros, the length in bits (64
	// bits, big-endian) at the end of one block or, when it does not fit
	// after the last bytes (55 of them or more), of a second one.
	uint8_t tail[128] = {0};
	for (size_t i = 0; i < left; i++)
		tail[i] = b[i];
	tail[left] = 0x80;
	size_t blocks = left < 56 ? 1 : 2;
	uint64_t bitlen = (uint64_t)n * 8;
	for (size_t i = 0; i < 8; i++)
		tail[blocks * 64 - 1 - i] = (uint8_t)(bitlen >> (8 * i));
	for (size_t i = 0; i < blocks; i++)
		cfront_sha256_block(h, tail + 64 * i);
	for (int i = 0; i < 8; i++)
		for (int j = 0; j < 4; j++)
			sum[4 * i + j] = (uint8_t)(h[i] >> (24 - 8 * j));
}

// cfront_chain_name mirrors policy.ChainName: "SFORGE_", the first 10
// ASCII letters and digits of the id, "_", the first 5 bytes of the id's
// SHA-256 in lowercase hex. It writes the name NUL-terminated into out
// and returns its length (18 to 28), or 0 for an empty id (Go's error) or
// when the name and its NUL do not fit in cap bytes. ChainName reads the
// id as runes, but a byte below 0x80 is always a rune of its own (an
// invalid sequence is one byte, U+FFFD; a valid multi-byte one holds only
// bytes from 0x80), so reading bytes keeps the same ASCII characters.
static inline size_t cfront_chain_name(const char *id, size_t n, char *out, size_t cap) {
	static const char hex[] = "0123456789abcdef";
	char name[32] = "SFORGE_";
	size_t len = 7;
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n && len < 7 + 10; i++) {
		char c = id[i];
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
			name[len++] = c;
	}
	name[len++] = '_';
	uint8_t sum[32];
	cfront_sha256(id, n, sum);
	for (int i = 0; i < 5; i++) {
		name[len++] = hex[sum[i] >> 4];
		name[len++] = hex[sum[i] & 15];
	}
	if (len + 1 > cap)
		return 0;
	for (size_t i = 0; i < len; i++)
		out[i] = name[i];
	out[len] = '\0';
	return len;
}

#endif
