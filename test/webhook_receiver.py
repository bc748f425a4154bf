#!/usr/bin/env python3
"""Test webhook receiver for pg_outbox TAP tests and the demo.

Usage:
    python3 test/webhook_receiver.py --port 0 --ready-file /tmp/x.port \
        [--log requests.jsonl [--resume]] [--max-seconds 3600] [--idle-timeout S] \
        [--tls-cert cert.pem --tls-key key.pem]

Listens on 127.0.0.1 (or another loopback address given with --host) only.  --port 0 picks an ephemeral port; once the socket
is listening, the port number is written to --ready-file atomically (temp file
+ rename).  SO_REUSEADDR is set, so a restarted receiver can bind the same port
at once.  HTTP/1.1 with keep-alive (every response carries Content-Length),
one daemon thread per connection, a hand-written lean HTTP parser (request
bodies by Content-Length or chunked; "Expect: 100-continue" honoured), no
per-request logging.

Recorded requests (every path that does not start with /_control):
    {"seq": n,               # 1, 2, ... (continues from the log with --resume)
     "time": unix_float,     # when the full body had been received
     "method": "POST", "path": "/hooks/a",  # path WITHOUT the query string
     "query": "a=1",         # raw query string ("" if none)
     "conn": n,              # id of the TCP connection (for reuse checks)
     "headers": {...},       # names lower-cased; a repeated header's values
                             # are JOINED with ", " in arrival order
     "body": "...",          # UTF-8, undecodable bytes replaced (U+FFFD)
     "body_base64": "...",   # only present when the body was not valid UTF-8
     "response": 200 | "close" | "hang",   # what the rule PLANNED to answer
     "answered": 200 | null,  # what the client actually got: the status, once
                              # the whole response was written while the client
                              # was still connected; null when it was not (the
                              # client had closed, a close/hang rule, a failed
                              # write); absent while the request is in progress
     "answered_at": unix_float,  # when the answer began to be written (no
                              # client can have it earlier), or when it was
                              # abandoned
     "outcome": "answered" | "client_gone" | "receiver_stopped" |
                              "close" | "hang" | "write_failed"}
The record is logged (--log) when the request has been read; a second line
{"seq": n, "answered": ..., "answered_at": ..., "outcome": ...} follows once
the response was written or abandoned.  "answered" is the evidence a test
needs for "the worker received a 2xx": a request whose client timed out and
closed the connection before the (delayed) answer is NOT answered, although
its rule planned a 2xx.
Default answer: 200, body "ok".

Control API:
  POST   /_control/rules     JSON rule object (or an array of them) -> {"ok":true}
         {"path": "/hooks/a",      exact path, query ignored; "*" = any path
                                   that has no rule of its own
          "status": 503,           default 200 (503 when fail_ratio is given)
          "times": 2,              next N requests of that path; null/absent
                                   = forever.  Rules of a path are FIFO.
          "retry_after": "2",      optional Retry-After response header
          "headers": {...},        optional extra response headers
          "body": "text",          optional response body (default "ok" for
                                   2xx, "error" otherwise)
          "delay_ms": 0,           sleep before answering (or closing)
          "action": "respond" | "close" | "hang",
                                   close: drop the socket with no response;
                                   hang: no answer, hold the socket open up to
                                   hang_ms (default 60000) or until the client
                                   goes away, then close
          "hang_ms": 60000,
          "fail_ratio": 0.2, "seed": 1}
                                   apply the rule to a random fraction of FIRST
                                   deliveries only (request header
                                   outbox-attempt == "1"); other requests get
                                   the default 200.  Never consumed ("times"
                                   is ignored); stays until cleared.
  DELETE /_control/rules     clear all rules
  GET    /_control/requests[?path=/hooks/a][&since=SEQ]
                             JSON array of records with seq > SEQ
  GET    /_control/stats     {"requests": n, "connections": n, "by_path": {...},
                              "accepted": n, "open": n, "max_open": n}
         requests    = records since the last reset (incl. resumed ones)
         connections = distinct TCP connections that carried at least one
                       recorded (non-control) request since the last reset
         accepted    = all TCP connections accepted since reset/start
                       (includes control-API connections)
         open/max_open = currently open / peak concurrently open connections
  POST   /_control/reset     clear rules, records, counters (and truncate --log)

--log FILE appends each record as one JSON line (flushed per line).  With
--resume, records already in FILE are loaded at start-up (seq continues), so
records survive a restart of the receiver on the same port; rules and
connection counters do not.

SIGTERM/SIGINT exit promptly (status 0); --max-seconds (default 3600) is a
safety net after which the receiver exits by itself (status 0).
"""

import argparse
import json
import os
import random
import select
import signal
import socket
import socketserver
import sys
import threading
import time
from collections import deque
from urllib.parse import parse_qs

MAX_LINE = 65536
MAX_HEADERS = 200

REASONS = {
    100: "Continue", 200: "OK", 201: "Created", 202: "Accepted",
    204: "No Content", 301: "Moved Permanently", 302: "Found",
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
    409: "Conflict", 410: "Gone", 413: "Payload Too Large",
    415: "Unsupported Media Type", 422: "Unprocessable Entity",
    425: "Too Early", 429: "Too Many Requests",
    500: "Internal Server Error", 501: "Not Implemented",
    502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
}


class BadRequest(Exception):
    pass


class Rule:
    __slots__ = ("path", "status", "remaining", "retry_after", "headers",
                 "body", "delay", "action", "hang", "fail_ratio", "rng")

    def __init__(self, d):
        if not isinstance(d, dict):
            raise ValueError("rule must be a JSON object")
        path = d.get("path")
        if not isinstance(path, str) or not path:
            raise ValueError("rule needs a non-empty string 'path'")
        self.path = path.split("?", 1)[0] if path != "*" else path
        fr = d.get("fail_ratio")
        self.fail_ratio = None if fr is None else float(fr)
        if self.fail_ratio is not None and not 0.0 <= self.fail_ratio <= 1.0:
            raise ValueError("fail_ratio must be within [0, 1]")
        st = d.get("status")
        if st is None:
            st = 503 if self.fail_ratio is not None else 200
        self.status = int(st)
        if not 100 <= self.status <= 999:
            raise ValueError("bad status")
        t = d.get("times")
        self.remaining = None if t is None else int(t)
        if self.remaining is not None and self.remaining < 1:
            raise ValueError("times must be >= 1 or null")
        ra = d.get("retry_after")
        self.retry_after = None if ra is None else str(ra)
        h = d.get("headers") or {}
        if not isinstance(h, dict):
            raise ValueError("headers must be an object")
        self.headers = [(str(k), str(v)) for k, v in h.items()]
        b = d.get("body")
        if b is None:
            b = "ok" if 200 <= self.status < 300 else "error"
        self.body = str(b).encode("utf-8")
        self.delay = max(0.0, float(d.get("delay_ms") or 0) / 1000.0)
        self.action = d.get("action") or "respond"
        if self.action not in ("respond", "close", "hang"):
            raise ValueError("action must be respond, close or hang")
        hm = d.get("hang_ms")
        self.hang = (60000 if hm is None else float(hm)) / 1000.0
        self.rng = random.Random(d.get("seed"))


class State:
    """All shared mutable state, guarded by one lock."""

    def __init__(self, log_path, resume):
        self.lock = threading.Lock()
        self.rules = {}          # path -> deque[Rule]
        self.records = []
        self._by_seq = {}        # seq -> record, while loading a resumed log
        self.in_progress = {}    # seq -> record not yet answered or abandoned
        self.stopping = False    # set at shutdown: no answer is begun after it
        self.by_path = {}
        self.seq = 0
        self.epoch = 0           # bumped on reset (for per-connection counting)
        self.conn_ids = 0
        self.accepted = 0
        self.open = 0
        self.max_open = 0
        self.used_conns = 0
        self.log_path = log_path
        self.log = None
        if log_path:
            if resume and os.path.exists(log_path):
                self._load(log_path)
            self.log = open(log_path, "a", encoding="utf-8")
            self._close_unsettled(os.path.getmtime(log_path) if resume and os.path.exists(log_path) else None)

    def _load(self, path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except ValueError:
                    continue          # torn last line of a killed process
                if not isinstance(r, dict) or "seq" not in r:
                    continue
                if "outcome" in r and "path" not in r:     # an outcome line
                    rec = self._by_seq.get(int(r["seq"]))
                    if rec is not None:
                        rec.update(r)
                    continue
                self.records.append(r)
                self._by_seq[int(r["seq"])] = r
                self.seq = max(self.seq, int(r["seq"]))
                p = r.get("path", "")
                self.by_path[p] = self.by_path.get(p, 0) + 1

    def _close_unsettled(self, ended_at):
        """A request the previous process never finished (it was killed) was not
        answered: say so, as of when that process last wrote its log."""
        for rec in self.records:
            if "outcome" not in rec:
                self.settle(rec, "receiver_stopped", None, ended_at)
        self._by_seq = {}

    def abandon_in_progress(self):
        """At shutdown: the requests still in progress will never be answered.
        One whose answer is being written may well reach the client (the bytes are
        in the kernel once the write returns, and the exit only closes the socket):
        its handler is given a second to record it as answered, or it would be
        counted as unanswered although the client got it. No answer is begun once
        this has started (answer): one begun after the look below would reach the
        client of a request recorded as unanswered."""
        with self.lock:
            self.stopping = True
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            with self.lock:
                writing = any(rec.get("writing") for rec in self.in_progress.values())
            if not writing:
                break
            time.sleep(0.01)
        with self.lock:
            recs = list(self.in_progress.values())
        for rec in recs:
            self.settle(rec, "receiver_stopped")

    # -- connections --------------------------------------------------------
    def conn_open(self):
        with self.lock:
            self.conn_ids += 1
            self.accepted += 1
            self.open += 1
            if self.open > self.max_open:
                self.max_open = self.open
            return self.conn_ids

    def conn_close(self):
        with self.lock:
            self.open -= 1

    # -- requests -----------------------------------------------------------
    def record(self, conn, rec, attempt):
        """Store rec, pick the rule to apply (or None) and set rec['response']."""
        path = rec["path"]
        with self.lock:
            rule = None
            q = self.rules.get(path)
            if not q:
                q = self.rules.get("*")
            if q:
                head = q[0]
                if head.fail_ratio is not None:
                    if attempt == "1" and head.rng.random() < head.fail_ratio:
                        rule = head
                else:
                    rule = head
                    if head.remaining is not None:
                        head.remaining -= 1
                        if head.remaining <= 0:
                            q.popleft()
                            if not q:
                                del self.rules[head.path]
            if rule is None:
                rec["response"] = 200
            elif rule.action == "respond":
                rec["response"] = rule.status
            else:
                rec["response"] = rule.action
            self.seq += 1
            rec["seq"] = self.seq
            self.records.append(rec)
            self.in_progress[self.seq] = rec
            self.by_path[path] = self.by_path.get(path, 0) + 1
            if conn.epoch != self.epoch:
                conn.epoch = self.epoch
                self.used_conns += 1
            if self.log is not None:
                self.log.write(json.dumps(rec, ensure_ascii=False) + "\n")
                self.log.flush()
            return rule

    def settle(self, rec, outcome, status=None, at=None):
        """Record what the client actually got for rec: status (answered) or None.
        at: when the answer began to be written (the earliest moment the client
        could have it); now when there was no answer."""
        line = {"seq": rec["seq"], "answered": status,
                "answered_at": time.time() if at is None else at, "outcome": outcome}
        with self.lock:
            if self.in_progress.pop(rec["seq"], None) is None and "outcome" in rec:
                return               # already settled (stopped while answering)
            rec.update(line)
            if self.log is not None:
                self.log.write(json.dumps(line) + "\n")
                self.log.flush()

    def add_rules(self, rules):
        with self.lock:
            for r in rules:
                self.rules.setdefault(r.path, deque()).append(r)

    def clear_rules(self):
        with self.lock:
            self.rules.clear()

    def reset(self):
        with self.lock:
            self.rules.clear()
            self.records = []
            self._by_seq = {}
            self.in_progress = {}
            self.by_path = {}
            self.seq = 0
            self.epoch += 1
            self.accepted = 0
            self.used_conns = 0
            self.max_open = self.open
            if self.log is not None:
                self.log.truncate(0)
                self.log.seek(0)
                self.log.flush()

    def query(self, path, since):
        with self.lock:
            recs = self.records
            if since:
                # records are in seq order: binary search the start
                lo, hi = 0, len(recs)
                while lo < hi:
                    mid = (lo + hi) // 2
                    if recs[mid]["seq"] <= since:
                        lo = mid + 1
                    else:
                        hi = mid
                recs = recs[lo:]
            if path is not None:
                return [r for r in recs if r["path"] == path]
            return list(recs)

    def stats(self):
        with self.lock:
            return {"requests": len(self.records),
                    "connections": self.used_conns,
                    "by_path": dict(self.by_path),
                    "accepted": self.accepted,
                    "open": self.open,
                    "max_open": self.max_open}


class Handler(socketserver.BaseRequestHandler):
    """One instance per TCP connection; serves requests until close."""

    def setup(self):
        self.sock = self.request
        self.epoch = -1
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        if self.server.idle_timeout:
            self.sock.settimeout(self.server.idle_timeout)
        self.rfile = self.sock.makefile("rb", 65536)
        self.state = self.server.state
        self.conn_id = self.state.conn_open()

    def finish(self):
        self.state.conn_close()
        try:
            self.rfile.close()
        except OSError:
            pass

    def handle(self):
        try:
            while self.handle_one():
                pass
        except (OSError, ValueError, socket.timeout):
            pass
        except BadRequest as e:
            try:
                self.send(400, str(e).encode(), keep=False)
            except OSError:
                pass

    # -- HTTP plumbing ------------------------------------------------------
    def readline(self):
        line = self.rfile.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise BadRequest("line too long")
        return line

    def read_exact(self, n):
        data = self.rfile.read(n)
        if data is None or len(data) != n:
            raise OSError("short body")
        return data

    def read_chunked(self):
        parts = []
        while True:
            line = self.readline()
            if not line:
                raise OSError("eof in chunked body")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise BadRequest("bad chunk size")
            if size == 0:
                while True:          # trailers
                    t = self.readline()
                    if not t or t in (b"\r\n", b"\n"):
                        break
                return b"".join(parts)
            parts.append(self.read_exact(size))
            self.readline()          # CRLF after chunk

    def send(self, status, body, keep=True, extra=(), head=False):
        out = ["HTTP/1.1 %d %s\r\nContent-Length: %d\r\n"
               % (status, REASONS.get(status, "Status"), len(body))]
        for k, v in extra:
            out.append("%s: %s\r\n" % (k, v))
        if not keep:
            out.append("Connection: close\r\n")
        out.append("\r\n")
        data = "".join(out).encode("latin-1")
        if not head:
            data += body
        self.sock.sendall(data)

    def send_json(self, status, obj, keep):
        self.send(status, json.dumps(obj).encode(), keep,
                  (("Content-Type", "application/json"),))

    def handle_one(self):
        line = self.readline()
        while line in (b"\r\n", b"\n"):
            line = self.readline()
        if not line:
            return False
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            raise BadRequest("bad request line")
        method, target, version = parts
        hdrs = {}
        last = None
        for _ in range(MAX_HEADERS + 1):
            h = self.readline()
            if not h:
                return False
            if h in (b"\r\n", b"\n"):
                break
            s = h.decode("latin-1").rstrip("\r\n")
            if s[:1] in (" ", "\t") and last is not None:   # obs-fold
                hdrs[last] += " " + s.strip()
                continue
            name, sep, value = s.partition(":")
            if not sep:
                raise BadRequest("bad header line")
            name = name.strip().lower()
            value = value.strip()
            if name in hdrs:
                hdrs[name] += ", " + value
            else:
                hdrs[name] = value
            last = name
        else:
            raise BadRequest("too many headers")

        conn_tokens = hdrs.get("connection", "").lower()
        if version == "HTTP/1.1":
            keep = "close" not in conn_tokens
        else:
            keep = "keep-alive" in conn_tokens

        te = hdrs.get("transfer-encoding", "").lower()
        cl = hdrs.get("content-length")
        has_body = "chunked" in te or (cl is not None and cl.strip() not in ("", "0"))
        if (has_body and version == "HTTP/1.1"
                and hdrs.get("expect", "").lower() == "100-continue"):
            self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if "chunked" in te:
            body = self.read_chunked()
        elif cl is not None:
            try:
                n = int(cl.split(",")[0].strip() or 0)
            except ValueError:
                raise BadRequest("bad content-length")
            if n < 0:
                raise BadRequest("bad content-length")
            body = self.read_exact(n) if n else b""
        else:
            body = b""
        now = time.time()

        path, _, query = target.partition("?")
        if path.startswith("http://") or path.startswith("https://"):
            # absolute-form target: keep only the path
            rest = path.split("//", 1)[1]
            path = "/" + rest.split("/", 1)[1] if "/" in rest else "/"

        if path.startswith("/_control"):
            return self.control(method, path, query, body, keep)

        try:
            text = body.decode("utf-8")
            b64 = None
        except UnicodeDecodeError:
            import base64
            text = body.decode("utf-8", errors="replace")
            b64 = base64.b64encode(body).decode("ascii")
        rec = {"seq": 0, "time": now, "method": method, "path": path,
               "query": query, "conn": self.conn_id, "headers": hdrs,
               "body": text}
        if b64 is not None:
            rec["body_base64"] = b64
        rule = self.state.record(self, rec, hdrs.get("outbox-attempt"))
        head = method == "HEAD"
        if rule is None:
            return self.answer(rec, 200, b"ok", keep, (), head)
        if rule.action == "hang":
            self.hang(rule.hang)
            self.state.settle(rec, "hang")
            return False
        if rule.delay:
            time.sleep(rule.delay)
        if rule.action == "close":
            self.abort()
            self.state.settle(rec, "close")
            return False
        extra = list(rule.headers)
        if rule.retry_after is not None:
            extra.append(("Retry-After", rule.retry_after))
        return self.answer(rec, rule.status, rule.body, keep, extra, head)

    def answer(self, rec, status, body, keep, extra, head):
        """Writes the response unless the client is gone, and records which."""
        if self.client_gone():
            self.state.settle(rec, "client_gone")
            self.abort()
            return False
        started = time.time()
        with self.state.lock:
            stopping = self.state.stopping
            if not stopping:
                rec["writing"] = True   # see abandon_in_progress
        if stopping:                    # recorded as receiver_stopped: never answered
            self.abort()
            return False
        try:
            self.send(status, body, keep, extra, head=head)
        except OSError:
            self.state.settle(rec, "write_failed")
            raise
        self.state.settle(rec, "answered", status, started)
        return keep

    def client_gone(self):
        """True when the client closed (or reset) its side: EOF is readable.
        A pipelined next request is data, not EOF."""
        try:
            r, _, _ = select.select([self.sock], [], [], 0)
            if not r:
                return False
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True

    def abort(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def hang(self, seconds):
        """Hold the connection without answering until timeout or client EOF."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                r, _, _ = select.select([self.sock], [], [], min(left, 0.5))
                if r:
                    if not self.sock.recv(1, socket.MSG_PEEK):
                        break                       # client went away
                    time.sleep(min(left, 0.2))      # pipelined data: ignore
            except (OSError, ValueError):
                break
        self.abort()

    # -- control API --------------------------------------------------------
    def control(self, method, path, query, body, keep):
        st = self.state
        if path == "/_control/rules" and method == "POST":
            try:
                d = json.loads(body.decode("utf-8") or "null")
                rules = [Rule(x) for x in (d if isinstance(d, list) else [d])]
            except (ValueError, TypeError) as e:
                self.send_json(400, {"ok": False, "error": str(e)}, keep)
                return keep
            st.add_rules(rules)
            self.send_json(200, {"ok": True}, keep)
        elif path == "/_control/rules" and method == "DELETE":
            st.clear_rules()
            self.send_json(200, {"ok": True}, keep)
        elif path == "/_control/reset" and method == "POST":
            st.reset()
            self.send_json(200, {"ok": True}, keep)
        elif path == "/_control/requests" and method == "GET":
            q = parse_qs(query)
            p = q.get("path", [None])[0]
            try:
                since = int(q.get("since", ["0"])[0] or 0)
            except ValueError:
                since = 0
            self.send_json(200, st.query(p, since), keep)
        elif path == "/_control/stats" and method == "GET":
            self.send_json(200, st.stats(), keep)
        else:
            self.send_json(404, {"ok": False, "error": "unknown control request"}, keep)
        return keep


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True        # SO_REUSEADDR: rebind the port at once
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        pass                          # stay quiet


def main():
    ap = argparse.ArgumentParser(description="pg_outbox test webhook receiver")
    ap.add_argument("--host", default="127.0.0.1",
                    help="loopback address to listen on (127.0.0.0/8 only)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ready-file")
    ap.add_argument("--log")
    ap.add_argument("--resume", action="store_true",
                    help="load records already in --log at start-up")
    ap.add_argument("--max-seconds", type=float, default=3600)
    ap.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    ap.add_argument("--tls-key", help="... and this private key (PEM)")
    ap.add_argument("--backlog", type=int, default=1024,
                    help="listen backlog (5 mimics Python's http.server defaults: "
                         "SYNs beyond it are dropped and retried by the client's kernel)")
    ap.add_argument("--idle-timeout", type=float, default=0,
                    help="close keep-alive connections idle this long (0 = never)")
    args = ap.parse_args()

    threading.stack_size(512 * 1024)
    if not args.host.startswith("127."):
        ap.error("--host must be a loopback address (127.0.0.0/8)")
    Server.request_queue_size = args.backlog
    server = Server((args.host, args.port), Handler)
    server.state = State(args.log, args.resume)
    server.idle_timeout = args.idle_timeout or None
    if args.tls_cert:
        # HTTPS: the handshake happens at accept; a client that refuses the
        # certificate never gets as far as a request, so nothing is recorded.
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    port = server.server_address[1]

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    t = threading.Thread(target=server.serve_forever,
                         kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()

    if args.ready_file:
        tmp = "%s.tmp.%d" % (args.ready_file, os.getpid())
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.ready_file)
    sys.stderr.write("webhook_receiver listening on %s:%d\n" % (args.host, port))
    sys.stderr.flush()

    # Poll: a signal may be delivered to another thread, which would not
    # interrupt a long wait in the main thread.
    deadline = (time.monotonic() + args.max_seconds
                if args.max_seconds > 0 else float("inf"))
    while not stop.is_set() and time.monotonic() < deadline:
        stop.wait(0.05)
    try:
        server.socket.close()
        server.state.abandon_in_progress()
        if server.state.log is not None:
            server.state.log.flush()
    except Exception:
        pass
    os._exit(0)


if __name__ == "__main__":
    main()
