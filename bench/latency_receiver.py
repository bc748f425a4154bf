"""The receiver of bench/run.sh's latency case: answers every POST with 200 and logs when
its whole body had arrived, in test/webhook_receiver.py's jsonl form ("time", "body",
"response"), which bench/latency.py reads.

One thread and one event loop, and no garbage collector while it runs: the test
receiver (a thread per connection, which take turns on Python's interpreter lock, and
rules, control paths and a log flushed per request) added its own stalls to the
figure, on the two cores the database, the worker and pgbench share. A request's time
is taken as soon as its body is complete, before anything else is done with it; the log
is written when the loop is idle.

  python3 bench/latency_receiver.py --ready-file F --log F.jsonl [--max-seconds N]
Ends after --max-seconds (default 600), or on SIGTERM."""
import argparse
import gc
import json
import os
import selectors
import signal
import socket
import sys
import time

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


def content_length(head):
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip() or b"0")
    return 0


class Connection:
    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""

    # Every complete request in the buffer: (time, body); keep-alive and pipelining.
    def requests(self):
        done = []
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return done
            length = content_length(self.buffer[:end])
            if len(self.buffer) < end + 4 + length:
                return done
            done.append((time.time(), self.buffer[end + 4:end + 4 + length]))
            self.buffer = self.buffer[end + 4 + length:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--max-seconds", type=float, default=600)
    args = ap.parse_args()

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    with open(args.ready_file + ".tmp", "w") as f:
        f.write(str(listener.getsockname()[1]))
    os.replace(args.ready_file + ".tmp", args.ready_file)

    gc.disable()
    pending = []  # (time, body) not logged yet

    def write_pending(log):
        for at, body in pending:
            log.write(json.dumps({"time": at, "body": body.decode("utf-8", "replace"), "response": 200}) + "\n")
        log.flush()
        pending.clear()

    deadline = time.monotonic() + args.max_seconds
    with open(args.log, "a") as log:
        while not stop and time.monotonic() < deadline:
            events = selector.select(timeout=0.05)
            if not events and pending:
                write_pending(log)
            for key, _ in events:
                if key.data is None:
                    try:
                        sock, _ = listener.accept()
                    except BlockingIOError:
                        continue
                    # Blocking: the loop reads only what select() said is there, and a
                    # response is sent whole however the socket's buffer stands.
                    sock.setblocking(True)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    selector.register(sock, selectors.EVENT_READ, Connection(sock))
                    continue
                conn = key.data
                try:
                    data = conn.sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    selector.unregister(conn.sock)
                    conn.sock.close()
                    continue
                conn.buffer += data
                done = conn.requests()
                if done:
                    pending.extend(done)
                    try:
                        conn.sock.sendall(RESPONSE * len(done))
                    except OSError:
                        selector.unregister(conn.sock)
                        conn.sock.close()
        write_pending(log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
