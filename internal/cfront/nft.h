// The nftables engine's Install (engine/nftables) in C, for a front that
// installs the rules before the Go runtime starts: the same table, built by
// the same netlink messages as render()+queue() with google/nftables v0.3.0
// encode them (fewer acknowledgements asked for, every object echoed:
// cf_nft_batch), then compared with the plan as verifyContent compares its
// read-back. Everything here is static; the entry points are
// cfront_nft_install, or its two halves cfront_nft_prepare (no namespace
// needed) and cfront_nft_apply.
//
// Whatever the C is not sure of is left to Go: it returns 0, with nothing of
// ours left in the namespace, and the Go engine does the install (and says
// what went wrong). Only a thread stuck in the wrong namespace is an error
// of its own (-1).
//
// setns needs _GNU_SOURCE before the first system header: include this
// first, or define it (as the fronts do).
#ifndef SFORGE_CFRONT_NFT_H
#define SFORGE_CFRONT_NFT_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "allow.h"

// The kernel ABI this file speaks, under names of its own: musl-gcc (the
// fronts' compiler) has no Linux uapi headers on its include path. Where
// the headers are there (gcc, hence every cgo test build) each value is
// checked against them.
#if defined(__has_include)
#if __has_include(<linux/netfilter/nf_tables.h>) && __has_include(<linux/netfilter/nfnetlink.h>) && \
    __has_include(<linux/netlink.h>) && __has_include(<linux/netfilter.h>) && __has_include(<linux/magic.h>) && \
    __has_include(<linux/nsfs.h>)
#include <linux/magic.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/nsfs.h>
#define CFRONT_NFT_UAPI 1
#endif
#endif

enum {
	// linux/netlink.h
	CF_NETLINK_NETFILTER = 12,
	CF_NETLINK_CAP_ACK = 10,
	CF_SOL_NETLINK = 270,
	CF_NLMSG_ERROR = 2,
	CF_NLMSG_DONE = 3,
	CF_NLM_F_REQUEST = 0x1,
	CF_NLM_F_ACK = 0x4,
	CF_NLM_F_ECHO = 0x8,
	CF_NLM_F_DUMP = 0x300,
	CF_NLM_F_EXCL = 0x200,
	CF_NLM_F_CREATE = 0x400,
	CF_NLM_F_APPEND = 0x800,
	CF_NLA_F_NESTED = 0x8000,
	CF_NLA_TYPE_MASK = 0x3fff,
	// linux/magic.h
	CF_NSFS_MAGIC = 0x6e736673,
	// linux/nsfs.h: _IO(0xb7, 0x1)
	CF_NS_GET_USERNS = 0xb701,
	// linux/netfilter.h
	CF_NF_DROP = 0,
	CF_NF_ACCEPT = 1,
	CF_NFPROTO_INET = 1,
	CF_NFPROTO_IPV4 = 2,
	CF_NFPROTO_IPV6 = 10,
	CF_NF_INET_LOCAL_IN = 1,
	CF_NF_INET_LOCAL_OUT = 3,
	// linux/netfilter/nfnetlink.h
	CF_NFNETLINK_V0 = 0,
	CF_NFNL_SUBSYS_NFTABLES = 10,
	CF_NFNL_MSG_BATCH_BEGIN = 0x10,
	CF_NFNL_MSG_BATCH_END = 0x11,
	// linux/netfilter/nf_tables.h: messages
	CF_NFT_MSG_NEWTABLE = 0,
	CF_NFT_MSG_DELTABLE = 2,
	CF_NFT_MSG_NEWCHAIN = 3,
	CF_NFT_MSG_GETCHAIN = 4, // the GETs: the tests' read-back (cfronttest)
	CF_NFT_MSG_NEWRULE = 6,
	CF_NFT_MSG_GETRULE = 7,
	CF_NFT_MSG_NEWSET = 9,
	CF_NFT_MSG_GETSET = 10,
	CF_NFT_MSG_NEWSETELEM = 12,
	CF_NFT_MSG_GETSETELEM = 13,
	// attributes
	CF_NFTA_TABLE_NAME = 1,
	CF_NFTA_TABLE_FLAGS = 2,
	CF_NFTA_CHAIN_TABLE = 1,
	CF_NFTA_CHAIN_NAME = 3,
	CF_NFTA_CHAIN_HOOK = 4,
	CF_NFTA_CHAIN_POLICY = 5,
	CF_NFTA_CHAIN_TYPE = 7,
	CF_NFTA_HOOK_HOOKNUM = 1,
	CF_NFTA_HOOK_PRIORITY = 2,
	CF_NFTA_RULE_TABLE = 1,
	CF_NFTA_RULE_CHAIN = 2,
	CF_NFTA_RULE_EXPRESSIONS = 4,
	CF_NFTA_RULE_USERDATA = 7,
	CF_NFTA_LIST_ELEM = 1,
	CF_NFTA_EXPR_NAME = 1,
	CF_NFTA_EXPR_DATA = 2,
	CF_NFTA_SET_TABLE = 1,
	CF_NFTA_SET_NAME = 2,
	CF_NFTA_SET_FLAGS = 3,
	CF_NFTA_SET_KEY_TYPE = 4,
	CF_NFTA_SET_KEY_LEN = 5,
	CF_NFTA_SET_DESC = 9,
	CF_NFTA_SET_ID = 10,
	CF_NFTA_SET_TIMEOUT = 11,
	CF_NFTA_SET_USERDATA = 13,
	CF_NFTA_SET_DESC_SIZE = 1,
	CF_NFTA_SET_DESC_CONCAT = 2,
	CF_NFTA_SET_FIELD_LEN = 1,
	CF_NFTA_SET_ELEM_LIST_TABLE = 1,
	CF_NFTA_SET_ELEM_LIST_SET = 2,
	CF_NFTA_SET_ELEM_LIST_ELEMENTS = 3,
	CF_NFTA_SET_ELEM_LIST_SET_ID = 4,
	CF_NFTA_SET_ELEM_KEY = 1,
	CF_NFTA_SET_ELEM_DATA = 2,
	CF_NFTA_SET_ELEM_FLAGS = 3,
	CF_NFTA_SET_ELEM_KEY_END = 10,
	CF_NFTA_DATA_VALUE = 1,
	CF_NFTA_DATA_VERDICT = 2,
	CF_NFTA_VERDICT_CODE = 1,
	CF_NFTA_VERDICT_CHAIN = 2,
	CF_NFTA_IMMEDIATE_DREG = 1,
	CF_NFTA_IMMEDIATE_DATA = 2,
	CF_NFTA_META_DREG = 1,
	CF_NFTA_META_KEY = 2,
	CF_NFTA_META_SREG = 3,
	CF_NFTA_CMP_SREG = 1,
	CF_NFTA_CMP_OP = 2,
	CF_NFTA_CMP_DATA = 3,
	CF_NFTA_PAYLOAD_DREG = 1,
	CF_NFTA_PAYLOAD_BASE = 2,
	CF_NFTA_PAYLOAD_OFFSET = 3,
	CF_NFTA_PAYLOAD_LEN = 4,
	CF_NFTA_PAYLOAD_SREG = 5,
	CF_NFTA_PAYLOAD_CSUM_TYPE = 6,
	CF_NFTA_PAYLOAD_CSUM_OFFSET = 7,
	CF_NFTA_PAYLOAD_CSUM_FLAGS = 8,
	CF_NFTA_LOOKUP_SET = 1,
	CF_NFTA_LOOKUP_SREG = 2,
	CF_NFTA_LOOKUP_DREG = 3,
	CF_NFTA_LOOKUP_SET_ID = 4,
	CF_NFTA_LOOKUP_FLAGS = 5,
	CF_NFTA_CT_DREG = 1,
	CF_NFTA_CT_KEY = 2,
	CF_NFTA_CT_DIRECTION = 3,
	CF_NFTA_CT_SREG = 4,
	CF_NFTA_BITWISE_SREG = 1,
	CF_NFTA_BITWISE_DREG = 2,
	CF_NFTA_BITWISE_LEN = 3,
	CF_NFTA_BITWISE_MASK = 4,
	CF_NFTA_BITWISE_XOR = 5,
	CF_NFTA_REJECT_TYPE = 1,
	CF_NFTA_REJECT_ICMP_CODE = 2,
	// values
	CF_NFT_SET_INTERVAL = 0x4,
	CF_NFT_SET_MAP = 0x8,
	CF_NFT_SET_TIMEOUT = 0x10,
	CF_NFT_SET_EVAL = 0x20,
	CF_NFT_SET_CONCAT = 0x80,
	CF_NFT_SET_ELEM_INTERVAL_END = 0x1,
	CF_NFT_REG_VERDICT = 0,
	CF_NFT_REG_1 = 1,
	CF_NFT_REG32_01 = 9,
	CF_NFT_META_IIFNAME = 6,
	CF_NFT_META_OIFNAME = 7,
	CF_NFT_META_NFPROTO = 15,
	CF_NFT_META_L4PROTO = 16,
	CF_NFT_CT_STATE = 0,
	CF_NFT_CT_SRC = 8,
	CF_NFT_CT_DST = 9,
	CF_NFT_CT_PROTO_SRC = 11,
	CF_NFT_CT_PROTO_DST = 12,
	CF_NFT_PAYLOAD_NETWORK_HEADER = 1,
	CF_NFT_PAYLOAD_TRANSPORT_HEADER = 2,
	CF_NFT_CMP_EQ = 0,
	CF_NFT_CMP_NEQ = 1,
	CF_NFT_JUMP = -3,
	CF_NFT_LOOKUP_F_INV = 1,
	CF_NFT_REJECT_TCP_RST = 1,
	CF_NFT_REJECT_ICMPX_UNREACH = 2,
	CF_NFT_REJECT_ICMPX_ADMIN_PROHIBITED = 3,
	// the conntrack state bits of expr.CtStateBitESTABLISHED|RELATED
	CF_NF_CT_STATE_ESTABLISHED_RELATED = 2 | 4,
};

#ifdef CFRONT_NFT_UAPI
#define CF_SAME(x) _Static_assert((long)CF_##x == (long)(x), #x)
CF_SAME(NETLINK_NETFILTER);
CF_SAME(NS_GET_USERNS);
CF_SAME(NETLINK_CAP_ACK);
CF_SAME(NLMSG_ERROR);
CF_SAME(NLMSG_DONE);
CF_SAME(NLM_F_REQUEST);
CF_SAME(NLM_F_ACK);
CF_SAME(NLM_F_ECHO);
CF_SAME(NLM_F_DUMP);
CF_SAME(NLM_F_EXCL);
CF_SAME(NLM_F_CREATE);
CF_SAME(NLM_F_APPEND);
CF_SAME(NLA_F_NESTED);
_Static_assert(CF_NLA_TYPE_MASK == (uint16_t)NLA_TYPE_MASK, "NLA_TYPE_MASK");
CF_SAME(NSFS_MAGIC);
CF_SAME(NF_DROP);
CF_SAME(NF_ACCEPT);
CF_SAME(NFPROTO_INET);
CF_SAME(NFPROTO_IPV4);
CF_SAME(NFPROTO_IPV6);
CF_SAME(NF_INET_LOCAL_IN);
CF_SAME(NF_INET_LOCAL_OUT);
CF_SAME(NFNETLINK_V0);
CF_SAME(NFNL_SUBSYS_NFTABLES);
CF_SAME(NFNL_MSG_BATCH_BEGIN);
CF_SAME(NFNL_MSG_BATCH_END);
CF_SAME(NFT_MSG_NEWTABLE);
CF_SAME(NFT_MSG_DELTABLE);
CF_SAME(NFT_MSG_NEWCHAIN);
CF_SAME(NFT_MSG_GETCHAIN);
CF_SAME(NFT_MSG_NEWRULE);
CF_SAME(NFT_MSG_GETRULE);
CF_SAME(NFT_MSG_NEWSET);
CF_SAME(NFT_MSG_GETSET);
CF_SAME(NFT_MSG_NEWSETELEM);
CF_SAME(NFT_MSG_GETSETELEM);
CF_SAME(NFTA_TABLE_NAME);
CF_SAME(NFTA_TABLE_FLAGS);
CF_SAME(NFTA_CHAIN_TABLE);
CF_SAME(NFTA_CHAIN_NAME);
CF_SAME(NFTA_CHAIN_HOOK);
CF_SAME(NFTA_CHAIN_POLICY);
CF_SAME(NFTA_CHAIN_TYPE);
CF_SAME(NFTA_HOOK_HOOKNUM);
CF_SAME(NFTA_HOOK_PRIORITY);
CF_SAME(NFTA_RULE_TABLE);
CF_SAME(NFTA_RULE_CHAIN);
CF_SAME(NFTA_RULE_EXPRESSIONS);
CF_SAME(NFTA_RULE_USERDATA);
CF_SAME(NFTA_LIST_ELEM);
CF_SAME(NFTA_EXPR_NAME);
CF_SAME(NFTA_EXPR_DATA);
CF_SAME(NFTA_SET_TABLE);
CF_SAME(NFTA_SET_NAME);
CF_SAME(NFTA_SET_FLAGS);
CF_SAME(NFTA_SET_KEY_TYPE);
CF_SAME(NFTA_SET_KEY_LEN);
CF_SAME(NFTA_SET_DESC);
CF_SAME(NFTA_SET_ID);
CF_SAME(NFTA_SET_TIMEOUT);
CF_SAME(NFTA_SET_USERDATA);
CF_SAME(NFTA_SET_DESC_SIZE);
CF_SAME(NFTA_SET_DESC_CONCAT);
CF_SAME(NFTA_SET_FIELD_LEN);
CF_SAME(NFTA_SET_ELEM_LIST_TABLE);
CF_SAME(NFTA_SET_ELEM_LIST_SET);
CF_SAME(NFTA_SET_ELEM_LIST_ELEMENTS);
CF_SAME(NFTA_SET_ELEM_LIST_SET_ID);
CF_SAME(NFTA_SET_ELEM_KEY);
CF_SAME(NFTA_SET_ELEM_DATA);
CF_SAME(NFTA_SET_ELEM_FLAGS);
CF_SAME(NFTA_SET_ELEM_KEY_END);
CF_SAME(NFTA_DATA_VALUE);
CF_SAME(NFTA_DATA_VERDICT);
CF_SAME(NFTA_VERDICT_CODE);
CF_SAME(NFTA_VERDICT_CHAIN);
CF_SAME(NFTA_IMMEDIATE_DREG);
CF_SAME(NFTA_IMMEDIATE_DATA);
CF_SAME(NFTA_META_DREG);
CF_SAME(NFTA_META_KEY);
CF_SAME(NFTA_META_SREG);
CF_SAME(NFTA_CMP_SREG);
CF_SAME(NFTA_CMP_OP);
CF_SAME(NFTA_CMP_DATA);
CF_SAME(NFTA_PAYLOAD_DREG);
CF_SAME(NFTA_PAYLOAD_BASE);
CF_SAME(NFTA_PAYLOAD_OFFSET);
CF_SAME(NFTA_PAYLOAD_LEN);
CF_SAME(NFTA_PAYLOAD_SREG);
CF_SAME(NFTA_PAYLOAD_CSUM_TYPE);
CF_SAME(NFTA_PAYLOAD_CSUM_OFFSET);
CF_SAME(NFTA_PAYLOAD_CSUM_FLAGS);
CF_SAME(NFTA_LOOKUP_SET);
CF_SAME(NFTA_LOOKUP_SREG);
CF_SAME(NFTA_LOOKUP_DREG);
CF_SAME(NFTA_LOOKUP_SET_ID);
CF_SAME(NFTA_LOOKUP_FLAGS);
CF_SAME(NFTA_CT_DREG);
CF_SAME(NFTA_CT_KEY);
CF_SAME(NFTA_CT_DIRECTION);
CF_SAME(NFTA_CT_SREG);
CF_SAME(NFTA_BITWISE_SREG);
CF_SAME(NFTA_BITWISE_DREG);
CF_SAME(NFTA_BITWISE_LEN);
CF_SAME(NFTA_BITWISE_MASK);
CF_SAME(NFTA_BITWISE_XOR);
CF_SAME(NFTA_REJECT_TYPE);
CF_SAME(NFTA_REJECT_ICMP_CODE);
CF_SAME(NFT_SET_INTERVAL);
CF_SAME(NFT_SET_MAP);
CF_SAME(NFT_SET_TIMEOUT);
CF_SAME(NFT_SET_EVAL);
CF_SAME(NFT_SET_CONCAT);
CF_SAME(NFT_SET_ELEM_INTERVAL_END);
CF_SAME(NFT_REG_VERDICT);
CF_SAME(NFT_REG_1);
CF_SAME(NFT_REG32_01);
CF_SAME(NFT_META_IIFNAME);
CF_SAME(NFT_META_OIFNAME);
CF_SAME(NFT_META_NFPROTO);
CF_SAME(NFT_META_L4PROTO);
CF_SAME(NFT_CT_STATE);
CF_SAME(NFT_CT_SRC);
CF_SAME(NFT_CT_DST);
CF_SAME(NFT_CT_PROTO_SRC);
CF_SAME(NFT_CT_PROTO_DST);
CF_SAME(NFT_PAYLOAD_NETWORK_HEADER);
CF_SAME(NFT_PAYLOAD_TRANSPORT_HEADER);
CF_SAME(NFT_CMP_EQ);
CF_SAME(NFT_CMP_NEQ);
CF_SAME(NFT_JUMP);
CF_SAME(NFT_LOOKUP_F_INV);
CF_SAME(NFT_REJECT_TCP_RST);
CF_SAME(NFT_REJECT_ICMPX_UNREACH);
CF_SAME(NFT_REJECT_ICMPX_ADMIN_PROHIBITED);
_Static_assert(sizeof(struct nlmsghdr) == 16 && sizeof(struct nfgenmsg) == 4 && sizeof(struct nlattr) == 4,
               "netlink layout");
#undef CF_SAME
#endif

// Bounds. The plan (see cf_nft_plan) has at most 3 jumps, 6 IPv4 and 4 IPv6
// rules of at most 7 expressions; the set at most two elements per
// allowlist entry (a resolver is UDP and TCP port 53).
#define CF_NFT_MAX_RULES 16
#define CF_NFT_MAX_EXPRS 8
#define CF_NFT_MAX_ELEMS (2 * CFRONT_MAX_ENTRIES)
#define CF_NFT_NAME_MAX 64   // table, chain and set names we write or compare
#define CF_NFT_DATA_MAX 16   // cmp and bitwise data: an IPv6 address, IFNAMSIZ
#define CF_NFT_KEY_LEN 12    // allowKey: address, protocol, port, each padded to 4
#define CF_NFT_ELEM_BYTES 44 // one element in a NEWSETELEM: nest, KEY and KEY_END nests of 12 bytes
// maxElemsPerMessage in engine/nftables.
#define CF_NFT_ELEMS_PER_MSG 512
// The batch: the elements, and 16 KiB for everything else (table, 4
// chains, the set, at most CF_NFT_MAX_RULES rules of at most
// CF_NFT_MAX_EXPRS expressions of at most 100 bytes, comments). Writes
// beyond it are caught (cf_nft_buf.bad), never made.
#define CF_NFT_TX_MAX (16384 + CF_NFT_MAX_ELEMS * CF_NFT_ELEM_BYTES)
// One datagram from the kernel: a dump's skb holds at most 32 KiB
// (netlink_dump's allocation, bounded by netlink_recvmsg's max_recvmsg_len).
#define CF_NFT_RX_MAX (64 << 10)
// The receive buffer for the echoes of a long list (see cfront_nft_apply):
// the default holds those of this many elements with room to spare (about
// 50 KiB of it).
#define CF_NFT_ECHO_ELEMS_DEFAULT_BUF 128
#define CF_NFT_ECHO_RCVBUF (1 << 20)
// How long to wait for the kernel's answer before deciding the state is
// unknown. The library waits for ever; a front runs while the container's
// start waits, so it gives up (and removes what it may have made).
#define CF_NFT_TIMEOUT_SEC 10

// One expression, with the fields the library's expr types have and their
// unmarshal functions read: an expected expression and one read from
// the kernel encode the same way (cf_nft_put_expr) when they are equal for
// verify.go's sameExprs.
enum { CF_X_META = 1, CF_X_CMP, CF_X_PAYLOAD, CF_X_LOOKUP, CF_X_VERDICT, CF_X_CT, CF_X_BITWISE, CF_X_REJECT };
struct cf_nft_expr {
	int kind;
	uint32_t key;       // meta and ct key, payload base, reject type, cmp op
	uint32_t reg;       // meta, ct and cmp register; bitwise and lookup source; payload destination
	uint32_t reg2;      // bitwise and lookup destination; payload source
	int source;         // meta: SourceRegister; payload: PayloadWrite; lookup: IsDestRegSet
	int invert;         // lookup
	uint32_t off, len;  // payload offset and length; bitwise length
	uint32_t csum_type, csum_off, csum_flags, dir;
	int32_t verdict;    // verdict kind
	uint8_t code;       // reject ICMP code
	size_t n_data, n_xor;
	uint8_t data[CF_NFT_DATA_MAX], xor_[CF_NFT_DATA_MAX]; // cmp data, bitwise mask and xor
	uint32_t set_id;
	char name[CF_NFT_NAME_MAX]; // lookup set, verdict chain
	int bad;                    // received: longer than the fields hold (never equal to ours)
};

struct cf_nft_rule {
	int chain; // index in cf_nft_chains
	size_t n;
	struct cf_nft_expr e[CF_NFT_MAX_EXPRS + 1]; // the last: where cf_nft_x writes when full
	const char *comment;
};

// One allowlist set entry (render.go's allowEntry) and its element.
struct cf_nft_entry {
	uint32_t addr; // host order, masked
	uint8_t bits, proto;
	uint16_t port;
};
struct cf_nft_elem {
	uint8_t key[CF_NFT_KEY_LEN], end[CF_NFT_KEY_LEN];
	size_t n_key, n_end; // received: their lengths (> CF_NFT_KEY_LEN: too long to keep)
	int interval_end;
};

// The base chains, then one per family: plan.chains.
static const struct {
	const char *name, *type;
	int base;
	uint32_t hook;
} cf_nft_chains[4] = {
    {"output", "filter", 1, CF_NF_INET_LOCAL_OUT},
    {"input", "filter", 1, CF_NF_INET_LOCAL_IN},
    {"ipv4", NULL, 0, 0},
    {"ipv6", NULL, 0, 0},
};
enum { CF_OUTPUT, CF_INPUT, CF_IPV4, CF_IPV6 };

// allowKeyType: ipv4_addr . inet_proto . inet_service, as ConcatSetType
// computes its nft magic (6 bits per type: 7, 12, 13) and its length.
#define CF_NFT_KEY_TYPE ((7u << 12) | (12u << 6) | 13u)
#define CF_NFT_SET_NAME "allow_ipv4"
#define CF_NFT_SET_ID 1

// A chain as chainFromMsg reads it.
struct cf_nft_got_chain {
	char name[CF_NFT_NAME_MAX], type[CF_NFT_NAME_MAX];
	int has_type, has_hook, has_policy, bad;
	uint32_t hook, policy;
	int32_t prio;
};

// What the kernel says it holds (cf_nft_on_echo's, or a dump's), compared
// with the plan as it comes (cf_nft_on_rule, cf_nft_on_elems): nothing of
// it is kept but counts, the chains, and which planned element was seen.
// Small, so that cfront_nft_prepare's reset (cf_nft_got_reset) has written
// every page of it before the install: on this kind of machine a page
// first touched costs 10-25 µs, and the install touches no new one.
struct cf_nft_got {
	size_t n_chains, n_sets, n_elems, n_rules;
	struct cf_nft_got_chain chains[4];
	int set_ok;
	int bad;                        // a rule or element that is not the plan's
	size_t next[4];                 // per chain: where in the plan its next rule is looked for
	struct cf_nft_rule rule;        // the rule being compared
	uint8_t seen[CF_NFT_MAX_ELEMS]; // planned elements matched
	uint8_t cmp_a[512], cmp_b[512]; // two encoded expressions (sameExprs)
};

// Everything an install needs, in one allocation: the plan, the netlink
// buffer and what the kernel answered.
struct cf_nft {
	int fd;
	uint32_t seq;
	const char *table;
	struct cf_nft_got got;
	// The install's batch, encoded by cfront_nft_prepare: its length, the
	// sequence numbers of its acknowledged messages, and of the first of
	// those the kernel echoes (the echoes end with the batch's last).
	size_t batch_n;
	uint32_t batch_first, batch_last, echo_first;
	// The plan (render's plan).
	size_t n_rules;
	struct cf_nft_rule rules[CF_NFT_MAX_RULES + 1]; // the last: where cf_nft_rule writes when full
	int full;                                       // the plan did not fit
	int has_set;
	size_t n_entries, n_elems;
	struct cf_nft_entry entries[CF_NFT_MAX_ELEMS];
	struct cf_nft_elem elems[CF_NFT_MAX_ELEMS];
	// The batches, then the answers: a datagram from the kernel is
	// received where the batch was (already sent), so that the answers
	// land on pages the batch's encoding touched.
	uint8_t tx[CF_NFT_TX_MAX > CF_NFT_RX_MAX ? CF_NFT_TX_MAX : CF_NFT_RX_MAX];
};

// cf_nft_got_reset readies s->got for the kernel's answers.
static inline void cf_nft_got_reset(struct cf_nft *s) { memset(&s->got, 0, sizeof s->got); }

// --- encoding: what netlink.MarshalAttributes and the library's messages
// lay out. An attribute's length counts its data but not the padding to 4
// bytes that follows; a nest's counts everything inside.

struct cf_nft_buf {
	uint8_t *p;
	size_t len, cap;
	int bad;
};

static inline void cf_nft_raw(struct cf_nft_buf *b, const void *d, size_t n) {
	if (b->bad || n > b->cap - b->len) {
		b->bad = 1;
		return;
	}
	if (n)
		memcpy(b->p + b->len, d, n);
	b->len += n;
}

static inline void cf_nft_pad(struct cf_nft_buf *b) {
	static const uint8_t zero[4];
	cf_nft_raw(b, zero, (4 - b->len % 4) % 4);
}

static inline void cf_nft_u16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

static inline size_t cf_nft_begin(struct cf_nft_buf *b, uint16_t type) {
	size_t at = b->len;
	uint8_t h[4] = {0};
	cf_nft_u16(h + 2, type);
	cf_nft_raw(b, h, 4);
	return at;
}

static inline void cf_nft_end(struct cf_nft_buf *b, size_t at) {
	if (b->bad)
		return;
	cf_nft_u16(b->p + at, (uint16_t)(b->len - at));
	cf_nft_pad(b);
}

static inline void cf_nft_attr(struct cf_nft_buf *b, uint16_t type, const void *d, size_t n) {
	size_t at = cf_nft_begin(b, type);
	cf_nft_raw(b, d, n);
	cf_nft_end(b, at);
}

static inline void cf_nft_be32(struct cf_nft_buf *b, uint16_t type, uint32_t v) {
	uint8_t d[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
	cf_nft_attr(b, type, d, 4);
}

// A string attribute: the name and its NUL, as the library's []byte(s+"\x00").
static inline void cf_nft_str(struct cf_nft_buf *b, uint16_t type, const char *s) {
	cf_nft_attr(b, type, s, strlen(s) + 1);
}

// cf_nft_value is an NFTA_DATA_VALUE inside a nest of the given type.
static inline void cf_nft_value(struct cf_nft_buf *b, uint16_t type, const void *d, size_t n) {
	size_t at = cf_nft_begin(b, type);
	cf_nft_attr(b, CF_NFTA_DATA_VALUE, d, n);
	cf_nft_end(b, at);
}

// cf_nft_msg starts a message: nlmsghdr and nfgenmsg (extraHeader).
static inline size_t cf_nft_msg(struct cf_nft *s, struct cf_nft_buf *b, uint16_t type, uint16_t flags, uint8_t family,
                                uint16_t res_id) {
	size_t at = b->len;
	uint8_t h[20] = {0};
	uint32_t seq = ++s->seq;
	uint16_t t = type;
	memcpy(h + 4, &t, 2);
	memcpy(h + 6, &flags, 2);
	memcpy(h + 8, &seq, 4);
	h[16] = family;
	h[17] = CF_NFNETLINK_V0;
	h[18] = (uint8_t)(res_id >> 8); // big endian, as extraHeader writes it
	h[19] = (uint8_t)res_id;
	cf_nft_raw(b, h, sizeof h);
	return at;
}

static inline void cf_nft_msg_end(struct cf_nft_buf *b, size_t at) {
	if (b->bad)
		return;
	cf_nft_pad(b);
	uint32_t n = (uint32_t)(b->len - at);
	memcpy(b->p + at, &n, 4);
}

static inline uint16_t cf_nft_type(int msg) { return (uint16_t)(CF_NFNL_SUBSYS_NFTABLES << 8 | msg); }

// cf_nft_put_expr writes one expression as expr.Marshal does: its name,
// then its data in the order of the type's marshalData.
static inline void cf_nft_put_expr(struct cf_nft_buf *b, const struct cf_nft_expr *e) {
	static const char *const names[] = {NULL, "meta", "cmp", "payload", "lookup", "immediate", "ct", "bitwise", "reject"};
	if (e->kind < CF_X_META || e->kind > CF_X_REJECT || e->bad) {
		b->bad = 1;
		return;
	}
	cf_nft_str(b, CF_NFTA_EXPR_NAME, names[e->kind]);
	size_t d = cf_nft_begin(b, CF_NLA_F_NESTED | CF_NFTA_EXPR_DATA);
	switch (e->kind) {
	case CF_X_META: // Meta.marshalData
		cf_nft_be32(b, CF_NFTA_META_KEY, e->key);
		cf_nft_be32(b, e->source ? CF_NFTA_META_SREG : CF_NFTA_META_DREG, e->reg);
		break;
	case CF_X_CMP: // Cmp.marshalData
		cf_nft_be32(b, CF_NFTA_CMP_SREG, e->reg);
		cf_nft_be32(b, CF_NFTA_CMP_OP, e->key);
		cf_nft_value(b, CF_NLA_F_NESTED | CF_NFTA_CMP_DATA, e->data, e->n_data);
		break;
	case CF_X_PAYLOAD: // Payload.marshalData
		if (e->source)
			cf_nft_be32(b, CF_NFTA_PAYLOAD_SREG, e->reg2);
		else
			cf_nft_be32(b, CF_NFTA_PAYLOAD_DREG, e->reg);
		cf_nft_be32(b, CF_NFTA_PAYLOAD_BASE, e->key);
		cf_nft_be32(b, CF_NFTA_PAYLOAD_OFFSET, e->off);
		cf_nft_be32(b, CF_NFTA_PAYLOAD_LEN, e->len);
		if (e->csum_type > 0) {
			cf_nft_be32(b, CF_NFTA_PAYLOAD_CSUM_TYPE, e->csum_type);
			cf_nft_be32(b, CF_NFTA_PAYLOAD_CSUM_OFFSET, e->csum_off);
			if (e->csum_flags > 0)
				cf_nft_be32(b, CF_NFTA_PAYLOAD_CSUM_FLAGS, e->csum_flags);
		}
		break;
	case CF_X_LOOKUP: // Lookup.marshalData
		if (e->reg != 0)
			cf_nft_be32(b, CF_NFTA_LOOKUP_SREG, e->reg);
		if (e->source)
			cf_nft_be32(b, CF_NFTA_LOOKUP_DREG, e->reg2);
		if (e->invert)
			cf_nft_be32(b, CF_NFTA_LOOKUP_FLAGS, CF_NFT_LOOKUP_F_INV);
		cf_nft_str(b, CF_NFTA_LOOKUP_SET, e->name);
		cf_nft_be32(b, CF_NFTA_LOOKUP_SET_ID, e->set_id);
		break;
	case CF_X_VERDICT: { // Verdict.marshalData
		cf_nft_be32(b, CF_NFTA_IMMEDIATE_DREG, CF_NFT_REG_VERDICT);
		size_t imm = cf_nft_begin(b, CF_NLA_F_NESTED | CF_NFTA_IMMEDIATE_DATA);
		size_t v = cf_nft_begin(b, CF_NLA_F_NESTED | CF_NFTA_DATA_VERDICT);
		cf_nft_be32(b, CF_NFTA_VERDICT_CODE, (uint32_t)e->verdict);
		if (e->name[0])
			cf_nft_str(b, CF_NFTA_VERDICT_CHAIN, e->name);
		cf_nft_end(b, v);
		cf_nft_end(b, imm);
		break;
	}
	case CF_X_CT: // Ct.marshalData (the kernel's dump never makes it a source)
		cf_nft_be32(b, CF_NFTA_CT_KEY, e->key);
		cf_nft_be32(b, e->source ? CF_NFTA_CT_SREG : CF_NFTA_CT_DREG, e->reg);
		if (e->key == CF_NFT_CT_SRC || e->key == CF_NFT_CT_DST || e->key == CF_NFT_CT_PROTO_SRC ||
		    e->key == CF_NFT_CT_PROTO_DST)
			cf_nft_be32(b, CF_NFTA_CT_DIRECTION, e->dir);
		break;
	case CF_X_BITWISE: // Bitwise.marshalData
		cf_nft_be32(b, CF_NFTA_BITWISE_SREG, e->reg);
		cf_nft_be32(b, CF_NFTA_BITWISE_DREG, e->reg2);
		cf_nft_be32(b, CF_NFTA_BITWISE_LEN, e->len);
		cf_nft_value(b, CF_NLA_F_NESTED | CF_NFTA_BITWISE_MASK, e->data, e->n_data);
		cf_nft_value(b, CF_NLA_F_NESTED | CF_NFTA_BITWISE_XOR, e->xor_, e->n_xor);
		break;
	case CF_X_REJECT: // Reject.marshalData
		cf_nft_be32(b, CF_NFTA_REJECT_TYPE, e->key);
		cf_nft_attr(b, CF_NFTA_REJECT_ICMP_CODE, &e->code, 1);
		break;
	}
	cf_nft_end(b, d);
}

// --- the plan: render() over policy.Rules, for the table only ever
// created in a namespace without it.

// cf_nft_rule appends a rule to the plan (when the plan is full, to a
// spare that is never sent: cf_nft_plan then refuses it).
static inline struct cf_nft_rule *cf_nft_rule(struct cf_nft *s, int chain, const char *comment) {
	struct cf_nft_rule *r = &s->rules[CF_NFT_MAX_RULES];
	if (s->n_rules < CF_NFT_MAX_RULES)
		r = &s->rules[s->n_rules++];
	else
		s->full = 1;
	memset(r, 0, sizeof *r);
	r->chain = chain;
	r->comment = comment;
	return r;
}

// cf_nft_x appends an expression to r (when r is full, to its spare, and
// marks r: cf_nft_plan then refuses the plan).
static inline struct cf_nft_expr *cf_nft_x(struct cf_nft_rule *r, int kind) {
	struct cf_nft_expr *e = &r->e[CF_NFT_MAX_EXPRS];
	if (r->n < CF_NFT_MAX_EXPRS)
		e = &r->e[r->n++];
	else
		r->chain = -1;
	memset(e, 0, sizeof *e);
	e->kind = kind;
	return e;
}

static inline void cf_nft_meta(struct cf_nft_rule *r, uint32_t key, uint32_t reg) {
	struct cf_nft_expr *e = cf_nft_x(r, CF_X_META);
	e->key = key;
	e->reg = reg;
}

static inline void cf_nft_cmp(struct cf_nft_rule *r, uint32_t op, const void *d, size_t n) {
	struct cf_nft_expr *e = cf_nft_x(r, CF_X_CMP);
	e->reg = CF_NFT_REG_1;
	e->key = op;
	memcpy(e->data, d, n);
	e->n_data = n;
}

static inline void cf_nft_load(struct cf_nft_rule *r, uint32_t reg, uint32_t base, uint32_t off, uint32_t len) {
	struct cf_nft_expr *e = cf_nft_x(r, CF_X_PAYLOAD);
	e->reg = reg;
	e->key = base;
	e->off = off;
	e->len = len;
}

static inline void cf_nft_verdict(struct cf_nft_rule *r, int32_t v, const char *chain) {
	struct cf_nft_expr *e = cf_nft_x(r, CF_X_VERDICT);
	e->verdict = v;
	if (chain)
		strcpy(e->name, chain);
}

static inline void cf_nft_reject(struct cf_nft_rule *r, uint32_t type, uint8_t code) {
	struct cf_nft_expr *e = cf_nft_x(r, CF_X_REJECT);
	e->key = type;
	e->code = code;
}

// nfprotoIs.
static inline void cf_nft_nfproto(struct cf_nft_rule *r, uint8_t proto) {
	cf_nft_meta(r, CF_NFT_META_NFPROTO, CF_NFT_REG_1);
	cf_nft_cmp(r, CF_NFT_CMP_EQ, &proto, 1);
}

// ifname: meta iifname/oifname "lo", the full NUL-padded IFNAMSIZ.
static inline void cf_nft_ifname(struct cf_nft_rule *r, uint32_t key) {
	uint8_t name[16] = {'l', 'o'};
	cf_nft_meta(r, key, CF_NFT_REG_1);
	cf_nft_cmp(r, CF_NFT_CMP_EQ, name, sizeof name);
}

// denyRules through ruleExprs: reject TCP with a reset and the rest with
// ICMP(v6) administratively prohibited (icmpx), or drop everything.
static inline void cf_nft_deny(struct cf_nft *s, int chain, int drop) {
	struct cf_nft_rule *r = cf_nft_rule(s, chain, "everything else");
	if (drop) {
		cf_nft_verdict(r, CF_NF_DROP, NULL);
		return;
	}
	uint8_t tcp = 6;
	cf_nft_meta(r, CF_NFT_META_L4PROTO, CF_NFT_REG_1);
	cf_nft_cmp(r, CF_NFT_CMP_EQ, &tcp, 1);
	cf_nft_reject(r, CF_NFT_REJECT_TCP_RST, 0);
	r = cf_nft_rule(s, chain, "everything else");
	cf_nft_reject(r, CF_NFT_REJECT_ICMPX_UNREACH, CF_NFT_REJECT_ICMPX_ADMIN_PROHIBITED);
}

// setElements' order: widest network first, then address, protocol name
// ("tcp" < "udp" as 6 < 17), port.
static inline int cf_nft_entry_cmp(const void *pa, const void *pb) {
	const struct cf_nft_entry *a = pa, *b = pb;
	if (a->bits != b->bits)
		return a->bits < b->bits ? -1 : 1;
	if (a->addr != b->addr)
		return a->addr < b->addr ? -1 : 1;
	if (a->proto != b->proto)
		return a->proto < b->proto ? -1 : 1;
	return a->port < b->port ? -1 : a->port > b->port;
}

static inline uint32_t cf_nft_mask(uint8_t bits) { return bits ? 0xffffffffu << (32 - bits) : 0; }

// allowKey: the address in network order, the protocol, the port in network
// order, each field padded with zeros to 4 bytes.
static inline void cf_nft_key(uint8_t k[CF_NFT_KEY_LEN], uint32_t addr, uint8_t proto, uint16_t port) {
	memset(k, 0, CF_NFT_KEY_LEN);
	k[0] = (uint8_t)(addr >> 24);
	k[1] = (uint8_t)(addr >> 16);
	k[2] = (uint8_t)(addr >> 8);
	k[3] = (uint8_t)addr;
	k[4] = proto;
	k[8] = (uint8_t)(port >> 8);
	k[9] = (uint8_t)port;
}

static inline uint32_t cf_nft_addr(const uint8_t a[4]) {
	return (uint32_t)a[0] << 24 | (uint32_t)a[1] << 16 | (uint32_t)a[2] << 8 | a[3];
}

// cf_nft_plan is render(id, a) for an allowlist as policy.Rules reads it,
// after checking it holds what Canonical would accept (0 otherwise: the Go
// code says what is wrong). The rules, in the order of plan.rules:
//
//	output: meta nfproto ipv4 jump ipv4; meta nfproto ipv6 jump ipv6
//	input:  meta nfproto ipv6 jump ipv6
//	ipv4:   established/related accept; 127.0.0.11 rejected or dropped
//	        unless a resolver; oif lo accept; the resolvers' and endpoints'
//	        accept rules, one run of setable rules, as one set lookup; the
//	        deny rules
//	ipv6:   iif lo accept; oif lo accept; the deny rules
static inline int cf_nft_plan(struct cf_nft *s, const struct cfront_allowlist *a) {
	if (a->n_endpoints > CFRONT_MAX_ENTRIES || a->n_dns > CFRONT_MAX_ENTRIES ||
	    a->n_endpoints + a->n_dns > CFRONT_MAX_ENTRIES)
		return 0;
	for (size_t i = 0; i < a->n_endpoints; i++) { // NewEndpoint's checks
		const struct cfront_endpoint *e = &a->endpoints[i];
		if (e->bits > 32 || (cf_nft_addr(e->addr) & ~cf_nft_mask(e->bits)) || (e->proto != 6 && e->proto != 17) ||
		    e->port == 0)
			return 0;
	}
	// The jumps (policy.Hooks), base chains grouped, output first.
	struct cf_nft_rule *r = cf_nft_rule(s, CF_OUTPUT, "sforge ipv4");
	cf_nft_nfproto(r, CF_NFPROTO_IPV4);
	cf_nft_verdict(r, CF_NFT_JUMP, "ipv4");
	r = cf_nft_rule(s, CF_OUTPUT, "sforge ipv6");
	cf_nft_nfproto(r, CF_NFPROTO_IPV6);
	cf_nft_verdict(r, CF_NFT_JUMP, "ipv6");
	r = cf_nft_rule(s, CF_INPUT, "sforge ipv6");
	cf_nft_nfproto(r, CF_NFPROTO_IPV6);
	cf_nft_verdict(r, CF_NFT_JUMP, "ipv6");

	// IPv4: replies to allowed connections (ct state & (established |
	// related) != 0, the mask in host order as the library's NativeEndian).
	r = cf_nft_rule(s, CF_IPV4, "replies to allowed connections");
	struct cf_nft_expr *e = cf_nft_x(r, CF_X_CT);
	e->key = CF_NFT_CT_STATE;
	e->reg = CF_NFT_REG_1;
	e = cf_nft_x(r, CF_X_BITWISE);
	e->reg = e->reg2 = CF_NFT_REG_1;
	e->len = 4;
	uint32_t mask = CF_NF_CT_STATE_ESTABLISHED_RELATED;
	memcpy(e->data, &mask, 4);
	e->n_data = e->n_xor = 4;
	uint8_t zero[4] = {0};
	cf_nft_cmp(r, CF_NFT_CMP_NEQ, zero, 4);
	cf_nft_verdict(r, CF_NF_ACCEPT, NULL);

	// Docker's embedded resolver, unless it is one of the resolvers: a
	// destination rule (dstExprs) with finalVerdict for no protocol.
	int docker = 0;
	for (size_t i = 0; i < a->n_dns; i++)
		docker |= cf_nft_addr(a->dns[i]) == 0x7f00000bu;
	if (!docker) {
		static const uint8_t embedded[4] = {127, 0, 0, 11};
		r = cf_nft_rule(s, CF_IPV4, "no DNS: Docker embedded resolver");
		cf_nft_nfproto(r, CF_NFPROTO_IPV4);
		cf_nft_load(r, CF_NFT_REG_1, CF_NFT_PAYLOAD_NETWORK_HEADER, 16, 4);
		cf_nft_cmp(r, CF_NFT_CMP_EQ, embedded, 4);
		if (a->drop)
			cf_nft_verdict(r, CF_NF_DROP, NULL);
		else
			cf_nft_reject(r, CF_NFT_REJECT_ICMPX_UNREACH, CF_NFT_REJECT_ICMPX_ADMIN_PROHIBITED);
	}
	r = cf_nft_rule(s, CF_IPV4, "loopback");
	cf_nft_ifname(r, CF_NFT_META_OIFNAME);
	cf_nft_verdict(r, CF_NF_ACCEPT, NULL);

	// The resolvers (UDP, then TCP, port 53) and the endpoints: one run of
	// setable rules, hence one set (setRun) and one rule looking it up.
	if (a->n_dns + a->n_endpoints > 0) {
		s->has_set = 1;
		for (size_t i = 0; i < a->n_dns; i++) {
			uint32_t d = cf_nft_addr(a->dns[i]);
			s->entries[s->n_entries++] = (struct cf_nft_entry){d, 32, 17, 53};
			s->entries[s->n_entries++] = (struct cf_nft_entry){d, 32, 6, 53};
		}
		for (size_t i = 0; i < a->n_endpoints; i++) {
			const struct cfront_endpoint *ep = &a->endpoints[i];
			s->entries[s->n_entries++] = (struct cf_nft_entry){cf_nft_addr(ep->addr), ep->bits, ep->proto, ep->port};
		}
		// setElements: sorted, and an entry inside a kept wider network
		// with the same protocol and port dropped (pipapo refuses
		// overlaps; IPv4 prefixes nest or are disjoint).
		qsort(s->entries, s->n_entries, sizeof s->entries[0], cf_nft_entry_cmp);
		size_t kept = 0;
		for (size_t i = 0; i < s->n_entries; i++) {
			const struct cf_nft_entry *x = &s->entries[i];
			int covered = 0;
			for (size_t j = 0; j < kept && !covered; j++) {
				const struct cf_nft_entry *w = &s->entries[j];
				covered = w->proto == x->proto && w->port == x->port && (x->addr & cf_nft_mask(w->bits)) == w->addr;
			}
			if (!covered)
				s->entries[kept++] = *x;
		}
		s->n_entries = kept;
		for (size_t i = 0; i < kept; i++) {
			const struct cf_nft_entry *x = &s->entries[i];
			struct cf_nft_elem *el = &s->elems[s->n_elems++];
			cf_nft_key(el->key, x->addr, x->proto, x->port);
			cf_nft_key(el->end, x->addr | ~cf_nft_mask(x->bits), x->proto, x->port);
			el->n_key = el->n_end = CF_NFT_KEY_LEN;
		}
		// The run's comments, each once, in order, joined with ", ".
		const char *comment = a->n_dns == 0 ? "allowed endpoint" : a->n_endpoints == 0 ? "dns" : "dns, allowed endpoint";
		r = cf_nft_rule(s, CF_IPV4, comment);
		cf_nft_nfproto(r, CF_NFPROTO_IPV4);
		cf_nft_load(r, CF_NFT_REG_1, CF_NFT_PAYLOAD_NETWORK_HEADER, 16, 4);
		cf_nft_meta(r, CF_NFT_META_L4PROTO, CF_NFT_REG32_01);
		cf_nft_load(r, CF_NFT_REG32_01 + 1, CF_NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
		e = cf_nft_x(r, CF_X_LOOKUP);
		e->reg = CF_NFT_REG_1;
		strcpy(e->name, CF_NFT_SET_NAME);
		e->set_id = CF_NFT_SET_ID;
		cf_nft_verdict(r, CF_NF_ACCEPT, NULL);
	}
	cf_nft_deny(s, CF_IPV4, a->drop);

	// IPv6: loopback both ways, then the deny rules.
	r = cf_nft_rule(s, CF_IPV6, "loopback");
	cf_nft_ifname(r, CF_NFT_META_IIFNAME);
	cf_nft_verdict(r, CF_NF_ACCEPT, NULL);
	r = cf_nft_rule(s, CF_IPV6, "loopback");
	cf_nft_ifname(r, CF_NFT_META_OIFNAME);
	cf_nft_verdict(r, CF_NF_ACCEPT, NULL);
	cf_nft_deny(s, CF_IPV6, a->drop);

	// A full rule table or expression list is a plan we cannot hold:
	// never with these bounds, but checked.
	if (s->full)
		return 0;
	for (size_t i = 0; i < s->n_rules; i++)
		if (s->rules[i].chain < 0)
			return 0;
	return 1;
}

// --- the batch: create()'s first attempt, CreateTable then queue().

// cf_nft_table is addTable (flag NLM_F_EXCL for CreateTable, NLM_F_CREATE
// for AddTable) or DelTable: the name and zero flags.
static inline void cf_nft_table(struct cf_nft *s, struct cf_nft_buf *b, int msg, uint16_t flag) {
	static const uint8_t zero[4];
	size_t m = cf_nft_msg(s, b, cf_nft_type(msg), CF_NLM_F_REQUEST | flag, CF_NFPROTO_INET, 0);
	cf_nft_str(b, CF_NFTA_TABLE_NAME, s->table);
	cf_nft_attr(b, CF_NFTA_TABLE_FLAGS, zero, 4);
	cf_nft_msg_end(b, m);
}

// cf_nft_batch writes NFNL_MSG_BATCH_BEGIN, the messages of kind (0: the
// install; 1: deleteTable's AddTable and DelTable) and NFNL_MSG_BATCH_END.
// *first and *last are the sequence numbers of the acknowledged messages;
// for the install, s->echo_first is that of the first echoed one.
//
// The install asks for one acknowledgement, of its last message, where the
// library asks for one for every message: nfnetlink applies a batch whole
// or not at all and reports an error for a refused message (or a failed
// commit) before any acknowledgement, asked for or not. And it has every
// chain, set, element and rule echoed (NLM_F_ECHO): at its commit the
// kernel writes each object it made as a dump would (the same fill
// functions), into as few datagrams as they fit, sent before the
// acknowledgement. cf_nft_on_echo compares them with the plan as they
// come and cf_nft_verify concludes, as verifyContent compares its
// read-back: the same check, without the seven dump round trips after the
// commit (BenchmarkFrontInstall, 4 entries: 0.23 ms, against 0.30-0.33 ms
// with a read-back of four dumps).
static inline size_t cf_nft_batch(struct cf_nft *s, int del, uint32_t *first, uint32_t *last) {
	struct cf_nft_buf b = {s->tx, 0, sizeof s->tx, 0};
	size_t m = cf_nft_msg(s, &b, CF_NFNL_MSG_BATCH_BEGIN, CF_NLM_F_REQUEST, 0, CF_NFNL_SUBSYS_NFTABLES);
	cf_nft_msg_end(&b, m);
	*first = s->seq + 1;
	if (del) {
		cf_nft_table(s, &b, CF_NFT_MSG_NEWTABLE, CF_NLM_F_ACK | CF_NLM_F_CREATE);
		cf_nft_table(s, &b, CF_NFT_MSG_DELTABLE, CF_NLM_F_ACK);
	} else {
		cf_nft_table(s, &b, CF_NFT_MSG_NEWTABLE, CF_NLM_F_EXCL);
		s->echo_first = s->seq + 1;
		for (int c = 0; c < 4; c++) { // AddChain
			m = cf_nft_msg(s, &b, cf_nft_type(CF_NFT_MSG_NEWCHAIN), CF_NLM_F_REQUEST | CF_NLM_F_CREATE | CF_NLM_F_ECHO,
			               CF_NFPROTO_INET, 0);
			cf_nft_str(&b, CF_NFTA_CHAIN_TABLE, s->table);
			cf_nft_str(&b, CF_NFTA_CHAIN_NAME, cf_nft_chains[c].name);
			if (cf_nft_chains[c].base) {
				size_t h = cf_nft_begin(&b, CF_NLA_F_NESTED | CF_NFTA_CHAIN_HOOK);
				cf_nft_be32(&b, CF_NFTA_HOOK_HOOKNUM, cf_nft_chains[c].hook);
				cf_nft_be32(&b, CF_NFTA_HOOK_PRIORITY, 0); // ChainPriorityFilter
				cf_nft_end(&b, h);
				cf_nft_be32(&b, CF_NFTA_CHAIN_POLICY, CF_NF_ACCEPT);
				cf_nft_str(&b, CF_NFTA_CHAIN_TYPE, cf_nft_chains[c].type);
			}
			cf_nft_msg_end(&b, m);
		}
		if (s->has_set) {
			// AddSet(set, nil): flags interval|concat, the key type and
			// length, the batch-local id, the concatenation's field
			// lengths (NFTA_SET_DESC_SIZE nests holding an
			// NFTA_DATA_VALUE: the library's encoding of
			// NFTA_LIST_ELEM/NFTA_SET_FIELD_LEN, the same numbers), and
			// the key byte order user data (2, big endian) nft writes
			// for interval sets.
			static const uint8_t udata[6] = {0, 4, 2, 0, 0, 0};
			static const uint32_t fields[3] = {4, 1, 2};
			m = cf_nft_msg(s, &b, cf_nft_type(CF_NFT_MSG_NEWSET), CF_NLM_F_REQUEST | CF_NLM_F_CREATE | CF_NLM_F_ECHO,
			               CF_NFPROTO_INET, 0);
			cf_nft_str(&b, CF_NFTA_SET_TABLE, s->table);
			cf_nft_str(&b, CF_NFTA_SET_NAME, CF_NFT_SET_NAME);
			cf_nft_be32(&b, CF_NFTA_SET_FLAGS, CF_NFT_SET_INTERVAL | CF_NFT_SET_CONCAT);
			cf_nft_be32(&b, CF_NFTA_SET_KEY_TYPE, CF_NFT_KEY_TYPE);
			cf_nft_be32(&b, CF_NFTA_SET_KEY_LEN, CF_NFT_KEY_LEN);
			cf_nft_be32(&b, CF_NFTA_SET_ID, CF_NFT_SET_ID);
			size_t desc = cf_nft_begin(&b, CF_NLA_F_NESTED | CF_NFTA_SET_DESC);
			size_t concat = cf_nft_begin(&b, CF_NLA_F_NESTED | CF_NFTA_SET_DESC_CONCAT);
			for (int i = 0; i < 3; i++) {
				size_t f = cf_nft_begin(&b, CF_NFTA_SET_DESC_SIZE);
				cf_nft_be32(&b, CF_NFTA_DATA_VALUE, fields[i]);
				cf_nft_end(&b, f);
			}
			cf_nft_end(&b, concat);
			cf_nft_end(&b, desc);
			cf_nft_attr(&b, CF_NFTA_SET_USERDATA, udata, sizeof udata);
			cf_nft_msg_end(&b, m);
			// SetAddElements, in chunks of maxElemsPerMessage; each
			// element a nest numbered from 1 in its message.
			for (size_t at = 0; at < s->n_elems; at += CF_NFT_ELEMS_PER_MSG) {
				size_t n = s->n_elems - at < CF_NFT_ELEMS_PER_MSG ? s->n_elems - at : CF_NFT_ELEMS_PER_MSG;
				m = cf_nft_msg(s, &b, cf_nft_type(CF_NFT_MSG_NEWSETELEM),
				               CF_NLM_F_REQUEST | CF_NLM_F_CREATE | CF_NLM_F_ECHO, CF_NFPROTO_INET, 0);
				cf_nft_str(&b, CF_NFTA_SET_NAME, CF_NFT_SET_NAME);
				cf_nft_be32(&b, CF_NFTA_SET_ELEM_LIST_SET_ID, CF_NFT_SET_ID);
				cf_nft_str(&b, CF_NFTA_SET_TABLE, s->table);
				size_t list = cf_nft_begin(&b, CF_NLA_F_NESTED | CF_NFTA_SET_ELEM_LIST_ELEMENTS);
				for (size_t i = 0; i < n; i++) {
					const struct cf_nft_elem *el = &s->elems[at + i];
					size_t item = cf_nft_begin(&b, (uint16_t)(CF_NLA_F_NESTED | (i + 1)));
					cf_nft_value(&b, CF_NLA_F_NESTED | CF_NFTA_SET_ELEM_KEY, el->key, CF_NFT_KEY_LEN);
					cf_nft_value(&b, CF_NLA_F_NESTED | CF_NFTA_SET_ELEM_KEY_END, el->end, CF_NFT_KEY_LEN);
					cf_nft_end(&b, item);
				}
				cf_nft_end(&b, list);
				cf_nft_msg_end(&b, m);
			}
		}
		for (size_t i = 0; i < s->n_rules; i++) { // AddRule: appended
			const struct cf_nft_rule *r = &s->rules[i];
			uint16_t ack = i + 1 == s->n_rules ? CF_NLM_F_ACK : 0;
			m = cf_nft_msg(s, &b, cf_nft_type(CF_NFT_MSG_NEWRULE),
			               CF_NLM_F_REQUEST | CF_NLM_F_CREATE | CF_NLM_F_APPEND | CF_NLM_F_ECHO | ack, CF_NFPROTO_INET, 0);
			cf_nft_str(&b, CF_NFTA_RULE_TABLE, s->table);
			cf_nft_str(&b, CF_NFTA_RULE_CHAIN, cf_nft_chains[r->chain].name);
			size_t list = cf_nft_begin(&b, CF_NLA_F_NESTED | CF_NFTA_RULE_EXPRESSIONS);
			for (size_t j = 0; j < r->n; j++) {
				size_t el = cf_nft_begin(&b, CF_NLA_F_NESTED | CF_NFTA_LIST_ELEM);
				cf_nft_put_expr(&b, &r->e[j]);
				cf_nft_end(&b, el);
			}
			cf_nft_end(&b, list);
			// ruleUserData: the comment as an nftnl user data TLV
			// (type 0, length with the NUL).
			size_t n = strlen(r->comment);
			uint8_t udata[2 + CF_NFT_NAME_MAX];
			if (n + 1 > CF_NFT_NAME_MAX) {
				b.bad = 1;
				break;
			}
			udata[0] = 0;
			udata[1] = (uint8_t)(n + 1);
			memcpy(udata + 2, r->comment, n + 1);
			cf_nft_attr(&b, CF_NFTA_RULE_USERDATA, udata, n + 3);
			cf_nft_msg_end(&b, m);
		}
	}
	*last = s->seq;
	if (!del)
		*first = *last; // the one acknowledged message: the last rule
	m = cf_nft_msg(s, &b, CF_NFNL_MSG_BATCH_END, CF_NLM_F_REQUEST, 0, CF_NFNL_SUBSYS_NFTABLES);
	cf_nft_msg_end(&b, m);
	return b.bad ? 0 : b.len;
}

// --- talking to the kernel.

// cf_nft_recv reads one datagram into tx (what it held was sent): its
// length, or 0 with errno set (a datagram cut short is EMSGSIZE: what
// followed is lost).
static inline size_t cf_nft_recv(struct cf_nft *s) {
	for (;;) {
		ssize_t n = recv(s->fd, s->tx, sizeof s->tx, MSG_TRUNC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return 0;
		if ((size_t)n > sizeof s->tx || n == 0) {
			errno = EMSGSIZE;
			return 0;
		}
		return (size_t)n;
	}
}

// cf_nft_next steps through the messages of a datagram: the next one's
// header fields, its payload and its length; 0 at the end or on a message
// that does not fit.
struct cf_nft_msgview {
	uint16_t type, flags;
	uint32_t seq;
	const uint8_t *data; // after nlmsghdr
	size_t len;          // of data
};

static inline int cf_nft_next(const uint8_t *p, size_t n, size_t *at, struct cf_nft_msgview *v) {
	if (*at + 16 > n)
		return 0;
	uint32_t len;
	memcpy(&len, p + *at, 4);
	if (len < 16 || len > n - *at)
		return 0;
	memcpy(&v->type, p + *at + 4, 2);
	memcpy(&v->flags, p + *at + 6, 2);
	memcpy(&v->seq, p + *at + 8, 4);
	v->data = p + *at + 16;
	v->len = len - 16;
	*at += (len + 3) & ~3u;
	return 1;
}

// cf_nft_errno is an NLMSG_ERROR's error, as a positive errno (0: an ack).
static inline int cf_nft_errno(const struct cf_nft_msgview *v) {
	int32_t e;
	if (v->len < 4)
		return EPROTO;
	memcpy(&e, v->data, 4);
	return -e;
}

// cf_nft_send writes the whole buffer in one send, as the library's
// SendMessages does with one sendmsg: the batch is one datagram.
static inline int cf_nft_send(struct cf_nft *s, const uint8_t *p, size_t n) {
	for (;;) {
		ssize_t k = send(s->fd, p, n, 0);
		if (k < 0 && errno == EINTR)
			continue;
		return k == (ssize_t)n;
	}
}

// A handler of the messages a commit or a dump receives.
typedef void (*cf_nft_fn)(struct cf_nft *s, const struct cf_nft_msgview *v);

// cf_nft_commit sends the batch in tx (n bytes) and reads the acks of its
// messages first to last, as Flush does: 1 when every one came, 0 when the
// kernel refused the batch (one error: the batch is atomic, nothing was
// applied), -1 when the outcome is unknown (no answer, answers lost).
// Messages that are not acks (the echoes) go to fn, or are passed over.
static inline int cf_nft_commit(struct cf_nft *s, size_t n, uint32_t first, uint32_t last, cf_nft_fn fn) {
	if (n == 0 || !cf_nft_send(s, s->tx, n))
		return 0;
	uint32_t acked = 0, want = last - first + 1;
	while (acked < want) {
		size_t len = cf_nft_recv(s);
		if (len == 0)
			return -1;
		size_t at = 0;
		struct cf_nft_msgview v;
		while (cf_nft_next(s->tx, len, &at, &v)) {
			if (v.type != CF_NLMSG_ERROR) {
				if (fn)
					fn(s, &v);
				continue;
			}
			int err = cf_nft_errno(&v);
			if (err != 0) {
				errno = err;
				return 0;
			}
			if (v.seq >= first && v.seq <= last)
				acked++;
		}
	}
	return 1;
}

// cf_nft_flush encodes the batch of kind del (cf_nft_batch) into tx and
// commits it.
static inline int cf_nft_flush(struct cf_nft *s, int del) {
	uint32_t first, last;
	size_t n = cf_nft_batch(s, del, &first, &last);
	return cf_nft_commit(s, n, first, last, NULL);
}

// Attribute iteration: netlink.AttributeDecoder, type without its flags.
struct cf_nft_attrview {
	uint16_t type;
	const uint8_t *data;
	size_t len;
};

static inline int cf_nft_attr_next(const uint8_t *p, size_t n, size_t *at, struct cf_nft_attrview *a) {
	if (*at + 4 > n)
		return 0;
	uint16_t len, type;
	memcpy(&len, p + *at, 2);
	memcpy(&type, p + *at + 2, 2);
	if (len < 4 || len > n - *at)
		return 0;
	a->type = type & CF_NLA_TYPE_MASK;
	a->data = p + *at + 4;
	a->len = len - 4u;
	*at += (len + 3u) & ~3u;
	return 1;
}

static inline uint32_t cf_nft_get32(const struct cf_nft_attrview *a) {
	if (a->len < 4)
		return 0;
	return (uint32_t)a->data[0] << 24 | (uint32_t)a->data[1] << 16 | (uint32_t)a->data[2] << 8 | a->data[3];
}

// cf_nft_getstr copies a string attribute (its NUL and what follows
// dropped, as ad.String does) into out; 0 when it does not fit.
static inline int cf_nft_getstr(const struct cf_nft_attrview *a, char *out, size_t cap) {
	size_t n = 0;
	while (n < a->len && a->data[n])
		n++;
	if (n >= cap)
		return 0;
	memcpy(out, a->data, n);
	out[n] = '\0';
	return 1;
}

// cf_nft_getdata copies the value of a nest's data attribute into out
// (decodeElement, Cmp's and Bitwise's NFTA_DATA_VALUE): *n is its length,
// or cap + 1 when longer than out holds. first: only the first attribute
// counts (Cmp.unmarshal); otherwise the last of the given types does.
static inline void cf_nft_getdata(const struct cf_nft_attrview *a, uint16_t t1, uint16_t t2, int first, uint8_t *out,
                                  size_t cap, size_t *n) {
	size_t at = 0;
	struct cf_nft_attrview in;
	while (cf_nft_attr_next(a->data, a->len, &at, &in)) {
		if (in.type == t1 || in.type == t2) {
			if (in.len > cap) {
				*n = cap + 1;
			} else {
				memcpy(out, in.data, in.len);
				*n = in.len;
			}
		}
		if (first)
			return;
	}
}

// --- verify: verifyContent, reading what the library's decoders read, from
// the kernel's echoes of the install (or, in the tests, from dumps: the
// messages are the same).

// chainFromMsg, for the chains of our table (verifyChains filters a dump of
// every inet table's chains).
static inline void cf_nft_on_chain(struct cf_nft *s, const struct cf_nft_msgview *v) {
	if (v->type != cf_nft_type(CF_NFT_MSG_NEWCHAIN) || v->len < 4)
		return;
	char name[CF_NFT_NAME_MAX] = "", table[CF_NFT_NAME_MAX] = "", type[CF_NFT_NAME_MAX] = "";
	int has_table = 0, has_type = 0, has_hook = 0, has_policy = 0, bad = 0;
	uint32_t hook = 0, policy = 0;
	int32_t prio = 0;
	size_t at = 0;
	struct cf_nft_attrview a;
	while (cf_nft_attr_next(v->data + 4, v->len - 4, &at, &a)) {
		switch (a.type) {
		case CF_NFTA_CHAIN_NAME:
			bad |= !cf_nft_getstr(&a, name, sizeof name);
			break;
		case CF_NFTA_CHAIN_TABLE:
			has_table = cf_nft_getstr(&a, table, sizeof table);
			break;
		case CF_NFTA_CHAIN_TYPE:
			has_type = 1;
			bad |= !cf_nft_getstr(&a, type, sizeof type);
			break;
		case CF_NFTA_CHAIN_POLICY:
			has_policy = 1;
			policy = cf_nft_get32(&a);
			break;
		case CF_NFTA_CHAIN_HOOK: { // hookFromMsg: zero when absent
			has_hook = 1;
			hook = 0;
			prio = 0;
			size_t hat = 0;
			struct cf_nft_attrview h;
			while (cf_nft_attr_next(a.data, a.len, &hat, &h)) {
				if (h.type == CF_NFTA_HOOK_HOOKNUM)
					hook = cf_nft_get32(&h);
				if (h.type == CF_NFTA_HOOK_PRIORITY)
					prio = (int32_t)cf_nft_get32(&h);
			}
			break;
		}
		}
	}
	if (!has_table || strcmp(table, s->table) != 0)
		return;
	size_t i = s->got.n_chains++;
	if (i >= 4)
		return; // counted: more chains than planned
	struct cf_nft_got_chain *g = &s->got.chains[i];
	strcpy(g->name, name);
	strcpy(g->type, type);
	g->has_type = has_type;
	g->has_hook = has_hook;
	g->has_policy = has_policy;
	g->hook = hook;
	g->prio = prio;
	g->policy = policy;
	g->bad = bad;
}

// setsFromMsg and verifySets' comparison: our set's name, key type and
// length, and flags (interval and concatenation, no map, timeout or eval).
static inline void cf_nft_on_set(struct cf_nft *s, const struct cf_nft_msgview *v) {
	if (v->type != cf_nft_type(CF_NFT_MSG_NEWSET) || v->len < 4)
		return;
	s->got.n_sets++;
	char name[CF_NFT_NAME_MAX] = "";
	int named = 0, has_type = 0, timeout = 0;
	uint32_t flags = 0, type = 0, len = 0;
	size_t at = 0;
	struct cf_nft_attrview a;
	while (cf_nft_attr_next(v->data + 4, v->len - 4, &at, &a)) {
		switch (a.type) {
		case CF_NFTA_SET_NAME:
			named = cf_nft_getstr(&a, name, sizeof name);
			break;
		case CF_NFTA_SET_FLAGS:
			flags = cf_nft_get32(&a);
			timeout = (flags & CF_NFT_SET_TIMEOUT) != 0;
			break;
		case CF_NFTA_SET_TIMEOUT:
			timeout = 1;
			break;
		case CF_NFTA_SET_KEY_TYPE:
			has_type = 1;
			type = cf_nft_get32(&a);
			len = CF_NFT_KEY_LEN; // parseSetDatatype's length, for our type
			break;
		case CF_NFTA_SET_KEY_LEN:
			len = cf_nft_get32(&a);
			break;
		}
	}
	if (!named || strcmp(name, CF_NFT_SET_NAME) != 0)
		return;
	s->got.set_ok = has_type && type == CF_NFT_KEY_TYPE && len == CF_NFT_KEY_LEN && (flags & CF_NFT_SET_INTERVAL) &&
	                (flags & CF_NFT_SET_CONCAT) && !(flags & (CF_NFT_SET_MAP | CF_NFT_SET_EVAL)) && !timeout;
}

// cf_nft_match_elem is sameElements for one element received: a key range
// (an element without an end is its own), no interval end, equal to a
// planned element not matched yet, which it marks; anything else marks
// the answer bad.
static inline void cf_nft_match_elem(struct cf_nft *s, struct cf_nft_elem *g) {
	if (g->interval_end) {
		s->got.bad = 1;
		return;
	}
	if (g->n_end == 0) {
		memcpy(g->end, g->key, sizeof g->end);
		g->n_end = g->n_key;
	}
	if (g->n_key == CF_NFT_KEY_LEN && g->n_end == CF_NFT_KEY_LEN)
		for (size_t i = 0; i < s->n_elems; i++)
			if (!s->got.seen[i] && memcmp(g->key, s->elems[i].key, CF_NFT_KEY_LEN) == 0 &&
			    memcmp(g->end, s->elems[i].end, CF_NFT_KEY_LEN) == 0) {
				s->got.seen[i] = 1;
				return;
			}
	s->got.bad = 1;
}

// elementsFromMsg: every attribute of the element list is an element (one
// not an NFTA_LIST_ELEM is the library's empty element: not ours).
static inline void cf_nft_on_elems(struct cf_nft *s, const struct cf_nft_msgview *v) {
	if (v->type != cf_nft_type(CF_NFT_MSG_NEWSETELEM) || v->len < 4)
		return;
	size_t at = 0;
	struct cf_nft_attrview a;
	while (cf_nft_attr_next(v->data + 4, v->len - 4, &at, &a)) {
		if (a.type != CF_NFTA_SET_ELEM_LIST_ELEMENTS)
			continue;
		size_t eat = 0;
		struct cf_nft_attrview el;
		while (cf_nft_attr_next(a.data, a.len, &eat, &el)) {
			s->got.n_elems++;
			struct cf_nft_elem g = {0};
			if (el.type != CF_NFTA_LIST_ELEM) {
				s->got.bad = 1; // the library's empty element: none of ours
				continue;
			}
			size_t fat = 0;
			struct cf_nft_attrview f;
			while (cf_nft_attr_next(el.data, el.len, &fat, &f)) {
				if (f.type == CF_NFTA_SET_ELEM_KEY)
					cf_nft_getdata(&f, CF_NFTA_DATA_VALUE, CF_NFTA_DATA_VERDICT, 0, g.key, CF_NFT_KEY_LEN, &g.n_key);
				else if (f.type == CF_NFTA_SET_ELEM_KEY_END)
					cf_nft_getdata(&f, CF_NFTA_DATA_VALUE, CF_NFTA_DATA_VERDICT, 0, g.end, CF_NFT_KEY_LEN, &g.n_end);
				else if (f.type == CF_NFTA_SET_ELEM_FLAGS)
					g.interval_end = (cf_nft_get32(&f) & CF_NFT_SET_ELEM_INTERVAL_END) != 0;
			}
			cf_nft_match_elem(s, &g);
		}
	}
}

// CF_K keys cf_nft_parse_expr's switch: expression kind and attribute type.
#define CF_K(kind, type) ((kind) << 16 | (type))

// cf_nft_parse_expr reads one expression as exprsFromBytes and the types'
// unmarshal functions do. An expression the library would not decode to
// one of ours (another name, an immediate that is no verdict) is marked
// bad: never equal to ours. (The library skips names it does not know; so
// would a Go verify, which here is stricter.)
static inline void cf_nft_parse_expr(const struct cf_nft_attrview *elem, struct cf_nft_expr *e) {
	static const char *const names[] = {NULL, "meta", "cmp", "payload", "lookup", "immediate", "ct", "bitwise", "reject"};
	memset(e, 0, sizeof *e);
	e->bad = 1;
	char name[16] = "";
	size_t at = 0;
	struct cf_nft_attrview a, d = {0, NULL, 0};
	int has_data = 0;
	while (cf_nft_attr_next(elem->data, elem->len, &at, &a)) {
		if (a.type == CF_NFTA_EXPR_NAME && !cf_nft_getstr(&a, name, sizeof name))
			return;
		if (a.type == CF_NFTA_EXPR_DATA) {
			d = a;
			has_data = 1;
		}
	}
	for (int k = CF_X_META; k <= CF_X_REJECT; k++)
		if (strcmp(name, names[k]) == 0)
			e->kind = k;
	if (!e->kind || !has_data)
		return;
	e->bad = 0;
	int imm_reg = 0, imm_value = 0;
	at = 0;
	while (cf_nft_attr_next(d.data, d.len, &at, &a)) {
		uint32_t x = cf_nft_get32(&a);
		switch (CF_K(e->kind, a.type)) {
		case CF_K(CF_X_META, CF_NFTA_META_SREG):
			e->reg = x;
			e->source = 1;
			break;
		case CF_K(CF_X_META, CF_NFTA_META_DREG):
			e->reg = x;
			break;
		case CF_K(CF_X_META, CF_NFTA_META_KEY):
			e->key = x;
			break;
		case CF_K(CF_X_CMP, CF_NFTA_CMP_SREG):
			e->reg = x;
			break;
		case CF_K(CF_X_CMP, CF_NFTA_CMP_OP):
			e->key = x;
			break;
		case CF_K(CF_X_CMP, CF_NFTA_CMP_DATA):
			cf_nft_getdata(&a, CF_NFTA_DATA_VALUE, CF_NFTA_DATA_VALUE, 1, e->data, CF_NFT_DATA_MAX, &e->n_data);
			break;
		case CF_K(CF_X_PAYLOAD, CF_NFTA_PAYLOAD_DREG):
			e->reg = x;
			break;
		case CF_K(CF_X_PAYLOAD, CF_NFTA_PAYLOAD_SREG):
			e->reg2 = x;
			e->source = 1;
			break;
		case CF_K(CF_X_PAYLOAD, CF_NFTA_PAYLOAD_BASE):
			e->key = x;
			break;
		case CF_K(CF_X_PAYLOAD, CF_NFTA_PAYLOAD_OFFSET):
			e->off = x;
			break;
		case CF_K(CF_X_PAYLOAD, CF_NFTA_PAYLOAD_LEN):
			e->len = x;
			break;
		case CF_K(CF_X_PAYLOAD, CF_NFTA_PAYLOAD_CSUM_TYPE):
			e->csum_type = x;
			break;
		case CF_K(CF_X_PAYLOAD, CF_NFTA_PAYLOAD_CSUM_OFFSET):
			e->csum_off = x;
			break;
		case CF_K(CF_X_PAYLOAD, CF_NFTA_PAYLOAD_CSUM_FLAGS):
			e->csum_flags = x;
			break;
		case CF_K(CF_X_LOOKUP, CF_NFTA_LOOKUP_SET):
			e->bad |= !cf_nft_getstr(&a, e->name, sizeof e->name);
			break;
		case CF_K(CF_X_LOOKUP, CF_NFTA_LOOKUP_SET_ID):
			e->set_id = x;
			break;
		case CF_K(CF_X_LOOKUP, CF_NFTA_LOOKUP_SREG):
			e->reg = x;
			break;
		case CF_K(CF_X_LOOKUP, CF_NFTA_LOOKUP_DREG):
			e->reg2 = x;
			e->source = 1;
			break;
		case CF_K(CF_X_LOOKUP, CF_NFTA_LOOKUP_FLAGS):
			e->invert = (x & CF_NFT_LOOKUP_F_INV) != 0;
			break;
		case CF_K(CF_X_VERDICT, CF_NFTA_IMMEDIATE_DREG):
			imm_reg = (int)x;
			break;
		case CF_K(CF_X_VERDICT, CF_NFTA_IMMEDIATE_DATA): {
			// Immediate.unmarshal's data value, and Verdict.unmarshal:
			// the code at bytes 4..8 of NFTA_DATA_VERDICT, the chain
			// from byte 12 with its NULs trimmed.
			size_t iat = 0;
			struct cf_nft_attrview in;
			while (cf_nft_attr_next(a.data, a.len, &iat, &in)) {
				if (in.type == CF_NFTA_DATA_VALUE && in.len > 0)
					imm_value = 1;
				if (in.type != CF_NFTA_DATA_VERDICT)
					continue;
				if (in.len < 8) {
					e->bad = 1;
					continue;
				}
				e->verdict = (int32_t)((uint32_t)in.data[4] << 24 | (uint32_t)in.data[5] << 16 |
				                       (uint32_t)in.data[6] << 8 | in.data[7]);
				e->name[0] = '\0';
				if (in.len > 12) {
					const uint8_t *c = in.data + 12;
					size_t n = in.len - 12;
					while (n && c[0] == 0)
						c++, n--;
					while (n && c[n - 1] == 0)
						n--;
					if (n >= sizeof e->name)
						e->bad = 1;
					else {
						memcpy(e->name, c, n);
						e->name[n] = '\0';
						if (memchr(e->name, 0, n))
							e->bad = 1; // a NUL inside: no name of ours
					}
				}
			}
			break;
		}
		case CF_K(CF_X_CT, CF_NFTA_CT_KEY):
			e->key = x;
			break;
		case CF_K(CF_X_CT, CF_NFTA_CT_DREG):
			e->reg = x;
			break;
		case CF_K(CF_X_CT, CF_NFTA_CT_DIRECTION):
			e->dir = x;
			break;
		case CF_K(CF_X_BITWISE, CF_NFTA_BITWISE_SREG):
			e->reg = x;
			break;
		case CF_K(CF_X_BITWISE, CF_NFTA_BITWISE_DREG):
			e->reg2 = x;
			break;
		case CF_K(CF_X_BITWISE, CF_NFTA_BITWISE_LEN):
			e->len = x;
			break;
		case CF_K(CF_X_BITWISE, CF_NFTA_BITWISE_MASK):
			cf_nft_getdata(&a, CF_NFTA_DATA_VALUE, CF_NFTA_DATA_VALUE, 0, e->data, CF_NFT_DATA_MAX, &e->n_data);
			break;
		case CF_K(CF_X_BITWISE, CF_NFTA_BITWISE_XOR):
			cf_nft_getdata(&a, CF_NFTA_DATA_VALUE, CF_NFTA_DATA_VALUE, 0, e->xor_, CF_NFT_DATA_MAX, &e->n_xor);
			break;
		case CF_K(CF_X_REJECT, CF_NFTA_REJECT_TYPE):
			e->key = x;
			break;
		case CF_K(CF_X_REJECT, CF_NFTA_REJECT_ICMP_CODE):
			e->code = a.len ? a.data[0] : 0;
			break;
		}
	}
	if (e->n_data > CF_NFT_DATA_MAX || e->n_xor > CF_NFT_DATA_MAX)
		e->bad = 1;
	if (e->kind == CF_X_VERDICT && (imm_reg != CF_NFT_REG_VERDICT || imm_value))
		e->bad = 1; // an Immediate, not a Verdict
}

// cf_nft_same_expr is sameExprs for one expression: both encoded after
// marshalNormal's clearing of the lookup's set id, which the kernel does
// not dump.
static inline int cf_nft_same_expr(struct cf_nft *s, const struct cf_nft_expr *got, const struct cf_nft_expr *want) {
	struct cf_nft_expr g = *got, w = *want;
	g.set_id = w.set_id = 0;
	struct cf_nft_buf bg = {s->got.cmp_a, 0, sizeof s->got.cmp_a, 0}, bw = {s->got.cmp_b, 0, sizeof s->got.cmp_b, 0};
	cf_nft_put_expr(&bg, &g);
	cf_nft_put_expr(&bw, &w);
	return !bg.bad && !bw.bad && bg.len == bw.len && memcmp(s->got.cmp_a, s->got.cmp_b, bg.len) == 0;
}

// ruleFromMsg, and verifyRules for the rule read: its expressions, in a
// chain of our table, equal to the next planned rule of that chain (the
// next is looked for after the last one matched); anything else marks the
// answer bad.
static inline void cf_nft_on_rule(struct cf_nft *s, const struct cf_nft_msgview *v) {
	if (v->type != cf_nft_type(CF_NFT_MSG_NEWRULE) || v->len < 4)
		return;
	s->got.n_rules++;
	struct cf_nft_rule *r = &s->got.rule;
	r->n = 0;
	char name[CF_NFT_NAME_MAX] = "", table[CF_NFT_NAME_MAX] = "";
	int named = 0, in_table = 0;
	size_t at = 0;
	struct cf_nft_attrview a;
	while (cf_nft_attr_next(v->data + 4, v->len - 4, &at, &a)) {
		if (a.type == CF_NFTA_RULE_TABLE)
			in_table = cf_nft_getstr(&a, table, sizeof table) && strcmp(table, s->table) == 0;
		if (a.type == CF_NFTA_RULE_CHAIN)
			named = cf_nft_getstr(&a, name, sizeof name);
		if (a.type != CF_NFTA_RULE_EXPRESSIONS)
			continue;
		size_t eat = 0;
		struct cf_nft_attrview el;
		while (cf_nft_attr_next(a.data, a.len, &eat, &el)) {
			if (r->n >= CF_NFT_MAX_EXPRS) {
				r->n = CF_NFT_MAX_EXPRS + 1; // more than any rule of ours
				break;
			}
			cf_nft_parse_expr(&el, &r->e[r->n++]);
		}
	}
	int c = -1;
	for (int k = 0; k < 4 && named && in_table; k++)
		if (strcmp(name, cf_nft_chains[k].name) == 0)
			c = k;
	size_t i = c < 0 ? s->n_rules : s->got.next[c];
	while (i < s->n_rules && s->rules[i].chain != c)
		i++;
	if (i >= s->n_rules || s->rules[i].n != r->n) {
		s->got.bad = 1;
		return;
	}
	for (size_t j = 0; j < r->n; j++)
		if (!cf_nft_same_expr(s, &r->e[j], &s->rules[i].e[j])) {
			s->got.bad = 1;
			return;
		}
	s->got.next[c] = i + 1;
}

// cf_nft_on_echo takes the install's echoes (cf_nft_batch), each to the
// reader of its kind; anything else is passed over. An echo carries the
// sequence number of the message it answers, but an element's carries 0
// (nf_tables_setelem_notify writes none): the socket is the install's own,
// joined to no group, so what else could come is an answer to the batch.
static inline void cf_nft_on_echo(struct cf_nft *s, const struct cf_nft_msgview *v) {
	int elem = v->type == cf_nft_type(CF_NFT_MSG_NEWSETELEM) && v->seq == 0;
	if (!elem && (v->seq < s->echo_first || v->seq > s->batch_last))
		return;
	if (v->type == cf_nft_type(CF_NFT_MSG_NEWCHAIN))
		cf_nft_on_chain(s, v);
	else if (v->type == cf_nft_type(CF_NFT_MSG_NEWSET))
		cf_nft_on_set(s, v);
	else if (v->type == cf_nft_type(CF_NFT_MSG_NEWSETELEM))
		cf_nft_on_elems(s, v);
	else if (v->type == cf_nft_type(CF_NFT_MSG_NEWRULE))
		cf_nft_on_rule(s, v);
}

// cf_nft_verify is verifyContent's comparison: 1 when what the kernel said
// it holds (cf_nft_on_echo's, or a dump's) is the plan. The rules and
// elements were compared as they came (cf_nft_on_rule, cf_nft_match_elem):
// here, that each matched and that as many came as were planned, so that
// every planned one was matched once. Each chain's rules are compared in
// the order they came: for the echoes, the batch's, which is the order of
// the chains' rules, every one appended to a chain the same batch made.
static inline int cf_nft_verify(struct cf_nft *s) {
	const struct cf_nft_got *got = &s->got;
	// verifyChains: our table's chains, each with its type, hook,
	// priority and policy (absent for the family chains).
	if (got->n_chains != 4)
		return 0;
	for (int c = 0; c < 4; c++) {
		int found = 0;
		for (int i = 0; i < 4 && !found; i++) {
			if (strcmp(got->chains[i].name, cf_nft_chains[c].name) != 0)
				continue;
			found = 1;
			const struct cf_nft_got_chain *g = &got->chains[i];
			if (g->bad)
				return 0;
			if (cf_nft_chains[c].base) {
				if (!g->has_type || strcmp(g->type, cf_nft_chains[c].type) != 0 || !g->has_hook ||
				    g->hook != cf_nft_chains[c].hook || g->prio != 0 || !g->has_policy || g->policy != CF_NF_ACCEPT)
					return 0;
			} else if ((g->has_type && g->type[0]) || g->has_hook || g->has_policy) {
				return 0;
			}
		}
		if (!found)
			return 0;
	}
	// verifySets, sameElements and verifyRules.
	if (got->n_sets != (size_t)s->has_set || (s->has_set && !got->set_ok))
		return 0;
	if (got->bad || got->n_elems != (s->has_set ? s->n_elems : 0) || got->n_rules != s->n_rules)
		return 0;
	// And no planned rule was passed over (implied by the counts; checked
	// all the same).
	for (int c = 0; c < 4; c++)
		for (size_t i = got->next[c]; i < s->n_rules; i++)
			if (s->rules[i].chain == c)
				return 0;
	return 1;
}

// cf_nft_may_return reports whether the calling thread, having entered
// another network namespace, could come back to its own: setns needs
// CAP_SYS_ADMIN in the user namespace that owns the namespace entered, and
// a process in a user namespace of its own holds it there only if that is
// its own. Rootless podman runs its hooks so: in its user namespace, in
// the host's network namespace, which the host's user namespace owns. 1
// when the thread's network namespace is owned by its user namespace; 0
// otherwise (an owner above it, or one below, where coming back would have
// worked: the child's way is as safe), or when it cannot tell.
//
// The answer is kept for the process (a front's one thread, which stays in
// its namespaces): the test costs 0.05-0.1 ms on this kind of machine (a
// namespace file made and released, a /proc lookup), so cfront_nft_prepare
// asks before the container exists, not in its isolation window.
static int cf_nft_may_return_known = -1;

static inline int cf_nft_may_return(void) {
	if (cf_nft_may_return_known >= 0)
		return cf_nft_may_return_known;
	int mine = 0;
	int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	int owner = self < 0 ? -1 : ioctl(self, CF_NS_GET_USERNS);
	struct stat a, b;
	if (owner >= 0)
		mine = fstat(owner, &a) == 0 && stat("/proc/thread-self/ns/user", &b) == 0 && a.st_dev == b.st_dev &&
		       a.st_ino == b.st_ino;
	if (owner >= 0)
		close(owner);
	if (self >= 0)
		close(self);
	if (self >= 0 && owner >= 0)
		cf_nft_may_return_known = mine; // a failure is not kept: asked again
	return mine;
}

// The child that opens the socket for a thread that could not come back
// from the namespace: it shares the caller's memory and descriptor table
// (the socket it opens is the caller's) and ends after the socket() call.
struct cf_nft_dial {
	int nsfd, fd, err;
};

static int cf_nft_dial_child(void *arg) {
	struct cf_nft_dial *d = arg;
	if (setns(d->nsfd, CLONE_NEWNET) != 0) {
		d->err = errno;
		return 1;
	}
	d->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, CF_NETLINK_NETFILTER);
	d->err = errno;
	return 0;
}

// cf_nft_socket_by_child opens the socket from a child in the namespace
// nsfd (clone with CLONE_VM | CLONE_FILES | CLONE_VFORK: the caller waits,
// and its own namespace never changes). The socket, or -1 (errno set).
static inline int cf_nft_socket_by_child(int nsfd) {
	static _Alignas(64) char stack[16384]; // the child's: a socket() call deep
	struct cf_nft_dial d = {nsfd, -1, 0};
	pid_t pid = clone(cf_nft_dial_child, stack + sizeof stack, CLONE_VM | CLONE_FILES | CLONE_VFORK | SIGCHLD, &d);
	if (pid < 0)
		return -1;
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	errno = d.err;
	return d.fd;
}

// cf_nft_socket is dial(): the calling thread enters the namespace nsfd
// for the socket() call only (a netlink socket stays in the namespace it
// was opened in) and returns at once; where it could not come back (its
// namespace owned by a user namespace above its own: a rootless engine's
// hook), a child opens the socket instead (one clone more). The socket, or
// -1 (nothing to undo), or -2 when the thread could not return to its own
// namespace all the same (errno set). The socket's errors come without
// the request they answer, and a receive gives up after
// CF_NFT_TIMEOUT_SEC.
static inline int cf_nft_socket(int nsfd) {
	struct statfs fs;
	if (fstatfs(nsfd, &fs) != 0 || fs.f_type != CF_NSFS_MAGIC) // openNetNS
		return -1;
	int fd, err;
	if (!cf_nft_may_return()) {
		fd = cf_nft_socket_by_child(nsfd);
		err = errno;
	} else {
		int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		if (self < 0)
			return -1;
		if (setns(nsfd, CLONE_NEWNET) != 0) {
			close(self);
			return -1;
		}
		fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, CF_NETLINK_NETFILTER);
		err = errno;
		if (setns(self, CLONE_NEWNET) != 0) {
			err = errno;
			if (fd >= 0)
				close(fd);
			close(self);
			errno = err;
			return -2;
		}
		close(self);
	}
	if (fd >= 0) {
		int one = 1;
		setsockopt(fd, CF_SOL_NETLINK, CF_NETLINK_CAP_ACK, &one, sizeof one);
		struct timeval tv = {CF_NFT_TIMEOUT_SEC, 0};
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	}
	errno = err;
	return fd;
}

// cfront_nft_prepare is the part of (*nftables.Engine).Install that needs
// no namespace: s (zeroed: calloc's, or static storage used once) gets the
// table's name (policy.ChainName; the string must outlive s), the plan for
// the canonical allowlist a and the batch that installs it. 1 when ready;
// 0 when the allowlist or name is not one the C is sure of (the Go engine
// is to install).
//
// A front prepares before the container exists, so that between the
// container's creation and its isolation only the netlink exchange runs:
// the plan touches most of what s uses, and on this kind of machine every
// page a process touches for the first time costs about 10 µs.
static inline int cfront_nft_prepare(struct cf_nft *s, const char *table, const struct cfront_allowlist *a) {
	size_t tn = table ? strlen(table) : 0;
	if (tn == 0 || tn >= CF_NFT_NAME_MAX || !a)
		return 0;
	s->table = table;
	s->fd = -1;
	cf_nft_may_return(); // known before the window
	if (!cf_nft_plan(s, a))
		return 0;
	s->batch_n = cf_nft_batch(s, 0, &s->batch_first, &s->batch_last);
	cf_nft_got_reset(s);
	return s->batch_n != 0;
}

// cfront_nft_apply is the rest of Install, for a namespace without our
// table: nsfd is the namespace (an nsfs file), s as cfront_nft_prepare
// left it (1), used once. It returns the number of nftables rules installed
// and verified (plan.Rules()); 0 when it did not install, with nothing of
// ours left in the namespace: the table was there already (untouched), the
// namespace is not one the C is sure of, the kernel refused, or what it
// echoed was not the plan (the table is then deleted again): the Go
// engine is to do the install; -1 when the calling thread could not return
// to its own network namespace (errno set): it is still in the target's,
// and the caller must fail closed. The socket is closed on return.
static inline int cfront_nft_apply(struct cf_nft *s, int nsfd) {
	int rules = 0;
	s->fd = cf_nft_socket(nsfd);
	if (s->fd == -2)
		return -1; // errno: setns's
	if (s->fd < 0)
		return 0;
	// A batch of the whole buffer must fit the send buffer (netlink
	// refuses a message larger than it). The echoes are queued while the
	// kernel handles the send, so they must all fit the receive buffer at
	// once: a few KiB for a short list, but 64 KiB for 512 elements, which
	// take twice that of the buffer (the default, 208 KiB, just holds
	// them; 128 KiB does not). An echo that does not fit is reported
	// (ENOBUFS), never silently lost, and the Go engine then installs.
	int sz = 0;
	socklen_t sl = sizeof sz;
	if (getsockopt(s->fd, SOL_SOCKET, SO_SNDBUF, &sz, &sl) == 0 && sz < 2 * CF_NFT_TX_MAX) {
		sz = 2 * CF_NFT_TX_MAX;
		setsockopt(s->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
	}
	if (s->n_elems > CF_NFT_ECHO_ELEMS_DEFAULT_BUF) {
		sz = CF_NFT_ECHO_RCVBUF;
		setsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
	}

	// The batch creates the table with NLM_F_EXCL: where it is there
	// already, the kernel refuses the whole batch (EEXIST) and leaves the
	// table as it is, for the Go engine to replace, as create()'s look
	// for an earlier table would (one round trip less).
	int r = cf_nft_commit(s, s->batch_n, s->batch_first, s->batch_last, cf_nft_on_echo);
	if (r == 0)
		goto out; // refused: the batch is atomic, nothing applied
	if (r > 0 && cf_nft_verify(s)) {
		rules = (int)s->n_rules;
		goto out;
	}
	// Unverified, or no answer: take out what may be there rather than
	// leave an unknown policy behind (deleteTable).
	cf_nft_flush(s, 1);
out:
	close(s->fd);
	s->fd = -1;
	return rules;
}

// cfront_nft_remove is (*nftables.Engine).Remove in the namespace nsfd:
// one batch creates the table and deletes it (deleteTable: it succeeds
// whether or not the table is there). s is only its buffer (static
// storage, or zeroed). It returns the netlink socket, still open, once the
// kernel acknowledged both messages: its last close waits for the kernel
// to free what was deleted (an RCU grace period), so the caller hands it
// off or closes it when that wait does not matter. -1 when it did not
// remove (the namespace is not one the C is sure of, no socket, a refusal
// or no answer; nothing to undo: the Go engine is to remove), -2 when the
// calling thread could not return to its own network namespace (errno
// set).
static inline int cfront_nft_remove(struct cf_nft *s, int nsfd, const char *table) {
	size_t tn = table ? strlen(table) : 0;
	if (tn == 0 || tn >= CF_NFT_NAME_MAX)
		return -1;
	s->table = table;
	s->fd = cf_nft_socket(nsfd);
	if (s->fd < 0)
		return s->fd; // -2: errno is setns's
	int r = cf_nft_flush(s, 1);
	int fd = s->fd;
	s->fd = -1;
	if (r != 1) {
		close(fd);
		return -1;
	}
	return fd;
}

// cfront_nft_install is prepare and apply on a state of its own (calloc'd,
// freed): the whole of (*nftables.Engine).Install for a namespace without
// our table, with cfront_nft_apply's results, as the tests run it
// (cfronttest). The fronts keep their state in static storage instead.
static inline int cfront_nft_install(int nsfd, const char *table, const struct cfront_allowlist *a) {
	struct cf_nft *s = calloc(1, sizeof *s);
	if (!s)
		return 0;
	int rules = cfront_nft_prepare(s, table, a) ? cfront_nft_apply(s, nsfd) : 0;
	int err = errno;
	free(s);
	errno = err;
	return rules;
}

#endif
